"""One way to get a SparkSession, for local mode and for spark-submit alike.

Under ``spark-submit`` (the launcher sets ``PYSPARK_GATEWAY_PORT``) the job
takes its master and resources from the command line: nothing here sets
``.master(...)``, whose value would silently override ``--master``. Run any
other way (``python -m clients.spark.analyze``, ``minibroker analyze``), the
job starts a local JVM: ``local[*]`` unless ``--master`` or
``MINIBROKER_SPARK_MASTER`` says otherwise, bound to 127.0.0.1, with no UI
and a quiet log.

A quiet start too: Spark's launcher always starts the JVM with
``--add-modules=jdk.incubator.vector``, and the JVM then prints ``WARNING: Using
incubator modules: jdk.incubator.vector`` on the stderr it inherits, a line no
JVM option turns off. So a local JVM is started with its stderr on a pipe
(``_jvm_stderr_filtered``), whose reader thread passes every line on to this
process's stderr except that one, for as long as the JVM lives.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "launched_by_spark_submit",
    "get_session",
    "spark_errors",
    "spark_error",
    "LOCAL_CONF",
    "QUICK_JVM",
    "QUICK_PLANS",
    "TEST_CONF",
]

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

# JVM options for jobs whose work per row is short (Parquet scans, small tables, generated
# rows): the JIT's first tier only, and the serial collector. Most of such a job's CPU is the
# JVM compiling Spark's own code and each query's; C1 alone compiles far more cheaply. The
# analysis of 10M trace events from Parquet: 78 -> 45 CPU seconds. Not for parsing JSON,
# which they make about 2.5x slower.
QUICK_JVM: dict[str, str] = {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}

# SQL settings for queries over a few thousand rows, too few to pay for compiling Java per
# query: no whole-stage code generation (the pathologies' analysis, a fresh JVM and three
# runs: 137 -> 132 CPU seconds), and no generated code for single expressions either, which
# Spark then evaluates interpreted (the same analysis in a warm test JVM: 15-17 -> 11-12 CPU
# seconds a run, 26 -> 19 for the first). The same tables and findings: Spark's interpreted
# and generated expressions compute the same values.
QUICK_PLANS: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

# Extra settings that make a test JVM start and run small jobs fast: one partition per
# shuffle, no adaptive re-planning, ``QUICK_PLANS`` and ``QUICK_JVM``.
TEST_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "1g",
    **QUICK_PLANS,
    **QUICK_JVM,
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
        with _jvm_stderr_filtered():
            spark = builder.getOrCreate()
    else:
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


#: What the JVM prints on stderr that says nothing to a reader of ours (see the module doc).
JVM_NOISE = (b"WARNING: Using incubator modules:",)


def _forward(read_fd: int, write_fd: int) -> None:
    """Copy lines from ``read_fd`` to ``write_fd`` until EOF, leaving out ``JVM_NOISE``."""
    with open(read_fd, "rb", buffering=0) as pipe:
        for line in pipe:
            if not line.startswith(JVM_NOISE):
                os.write(write_fd, line)


@contextlib.contextmanager
def _jvm_stderr_filtered() -> Iterator[threading.Thread | None]:
    """While the body runs, file descriptor 2 is a pipe: what is started then (the JVM)
    inherits it, and a daemon thread (yielded) passes its lines on to the real stderr
    until the last process holding the pipe has closed it."""
    try:
        sys.stderr.flush()
        real = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to filter
        yield None
        return
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    forwarder = threading.Thread(target=_forward, args=(read_fd, real), name="jvm-stderr", daemon=True)
    forwarder.start()
    try:
        yield forwarder
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # ours again; the JVM keeps the pipe (and the thread its copy of stderr)


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
