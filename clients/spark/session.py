"""One way to get a SparkSession, for local mode and for spark-submit alike.

Under ``spark-submit`` (the launcher sets ``PYSPARK_GATEWAY_PORT``) the job
takes its master and resources from the command line: nothing here sets
``.master(...)``, whose value would silently override ``--master``. Run any
other way (``python -m clients.spark.analyze``, ``minibroker analyze``), the
job starts a local JVM: ``local[*]`` unless ``--master`` or
``MINIBROKER_SPARK_MASTER`` says otherwise, bound to 127.0.0.1, with no UI
and a quiet log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["launched_by_spark_submit", "get_session", "spark_errors", "spark_error", "LOCAL_CONF", "TEST_CONF"]

CONF_DIR = Path(__file__).with_name("conf")

# Settings for a local JVM; ignored (never set) under spark-submit.
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.driver.memory": "3g",
    # the analysis's plans are large: no "Truncated the string representation" warning
    "spark.sql.debug.maxToStringFields": "1000",
}

# Extra settings that make a test JVM start and run small jobs fast. Not for
# real runs: the JVM options make large JSON parsing about 2.5x slower.
TEST_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def launched_by_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_session(app_name: str, master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The active session if there is one, else a new one (see module doc)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("SPARK_CONF_DIR", str(CONF_DIR))
        cores = os.cpu_count() or 2
        settings = dict(LOCAL_CONF)
        settings["spark.sql.shuffle.partitions"] = str(max(2, cores))
        settings.update(conf or {})
        builder = builder.master(master or os.environ.get("MINIBROKER_SPARK_MASTER") or "local[*]")
        for key, value in settings.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def spark_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a Spark job raises for a bad input or a failed JVM (imports PySpark)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def spark_error(exc: BaseException) -> str:
    """The first line worth showing of a PySpark or Py4J error (the Java exception's
    own message rather than Py4J's "An error occurred while calling ...")."""
    java = getattr(exc, "java_exception", None)
    text = str(java) if java is not None else str(exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0]
