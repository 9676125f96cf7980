"""Which engine makes a workload's action table, and what the in-process one refuses.

No PySpark here: the command line refuses contradictory options before
anything heavy is imported.
"""

from __future__ import annotations

import os

__all__ = ["choose_engine", "inprocess_refusal"]


def choose_engine(engine: str, master: str | None, out: str) -> str:
    """ "inprocess" or "spark": what ``--engine auto`` picks."""
    if engine != "auto":
        return engine
    from clients.spark.session import launched_by_spark_submit

    wants_spark = master or os.environ.get("MINIBROKER_SPARK_MASTER") or launched_by_spark_submit()
    return "spark" if wants_spark or ("://" in out and not out.startswith("file:")) else "inprocess"


def inprocess_refusal(out: str, master: str | None) -> str | None:
    """Why ``--engine inprocess`` cannot do what the other options ask, or None."""
    if "://" in out and not out.startswith("file:"):
        return f"--out {out!r} is a URL: the in-process engine writes a local directory (--engine spark writes URLs)"
    if master:
        return "--master names a Spark master: it goes with --engine spark (or auto), not inprocess"
    return None
