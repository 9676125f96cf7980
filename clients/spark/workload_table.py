"""The action table both workload engines write: its columns, the control rows, the summary.

One row per action (``docs/workloads.md``, "The action table"). The control
rows (connect, subscribe, pace, unsubscribe, disconnect: a handful per
client) and the summary are planned in pure Python from the workload file;
the sends, one row per message, are each engine's work: the Spark job
(``clients.spark.workload``) or the in-process one
(``clients.spark.workload_inprocess``). ``ACTION_SCHEMA`` is in Spark's
types; the in-process engine derives Arrow's from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pyspark.sql import types as T

from clients.spark.workload_spec import ConsumerGroup, ProducerGroup, Workload, send_counts

__all__ = ["ACTION_SCHEMA", "COLUMNS", "control_rows", "remove_stale_formats", "summarize"]

# The action table, in column order. One row per action.
ACTION_SCHEMA = T.StructType(
    [
        T.StructField("t", T.DoubleType(), False),  # seconds from the start of the run
        T.StructField("client", T.StringType(), False),  # e.g. "bulk-0"; one connection each
        T.StructField("seq", T.LongType(), False),  # the client's action number, in time order
        T.StructField("action", T.StringType(), False),
        T.StructField("group", T.StringType(), False),
        T.StructField("dest", T.StringType(), True),
        T.StructField("sub", T.StringType(), True),  # subscription id (subscribe, unsubscribe)
        T.StructField("size", T.LongType(), True),  # body bytes (send)
        T.StructField("priority", T.IntegerType(), True),  # send
        T.StructField("persistent", T.BooleanType(), True),  # send
        T.StructField("headers", T.MapType(T.StringType(), T.StringType()), True),  # send, subscribe
        T.StructField("selector", T.StringType(), True),  # subscribe
        T.StructField("ack", T.StringType(), True),  # subscribe
        T.StructField("prefetch", T.IntegerType(), True),  # subscribe
        T.StructField("process", T.DoubleType(), True),  # subscribe, pace: seconds per message
        T.StructField("client_id", T.StringType(), True),  # connect
    ]
)
COLUMNS = [f.name for f in ACTION_SCHEMA.fields]


def _row(t: float, client: str, seq: int, action: str, group: str, **cols: Any) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(t=float(t), client=client, seq=seq, action=action, group=group, **cols)
    return row


def control_rows(workload: Workload) -> list[dict]:
    """connect/disconnect for producers; connect/subscribe/pace/unsubscribe/disconnect
    for consumers. A producer's sends take seq 1..n between its connect and disconnect."""
    rows = []
    counts = send_counts(workload)
    for g in workload.producers:
        for c in g.clients():
            cid = c if g.client_id else None
            rows.append(_row(g.start, c, 0, "connect", g.name, dest=g.dest, client_id=cid))
            rows.append(_row(g.stop, c, counts[c] + 1, "disconnect", g.name, dest=g.dest))
    for consumer in workload.consumers:
        rows.extend(_consumer_rows(consumer))
    return rows


def _consumer_rows(g: ConsumerGroup) -> list[dict]:
    headers = dict(g.headers)
    if g.durable:
        headers["activemq.subscriptionName"] = g.durable
    paces = []
    for p in g.phases:
        paces.append((p.start, p.process))
        if p.stop < g.stop:
            paces.append((p.stop, g.process))
    rows = []
    for c in g.clients():
        rows.append(_row(g.start, c, 0, "connect", g.name, dest=g.dest, client_id=c if g.client_id else None))
        rows.append(
            _row(
                g.start,
                c,
                1,
                "subscribe",
                g.name,
                dest=g.dest,
                sub=c,
                headers=headers or None,
                selector=g.selector,
                ack=g.ack,
                prefetch=g.prefetch,
                process=g.process,
            )
        )
        seq = 2
        for t, process in paces:
            rows.append(_row(t, c, seq, "pace", g.name, dest=g.dest, sub=c, process=process))
            seq += 1
        rows.append(_row(g.stop, c, seq, "unsubscribe", g.name, dest=g.dest, sub=c))
        rows.append(_row(g.stop, c, seq + 1, "disconnect", g.name, dest=g.dest))
    return rows


def summarize(workload: Workload) -> dict[str, Any]:
    """Counts known from the plan alone (no Spark job needed)."""
    control = control_rows(workload)
    sends = send_counts(workload)
    actions: dict[str, int] = {"send": sum(sends.values())}
    for r in control:
        actions[r["action"]] = actions.get(r["action"], 0) + 1
    clients = []
    for g in workload.groups():
        role = "producer" if isinstance(g, ProducerGroup) else "consumer"
        for c in g.clients():
            clients.append({"client": c, "group": g.name, "role": role, "dest": g.dest, "sends": sends.get(c, 0)})
    return {
        "name": workload.name,
        "seed": workload.seed,
        "scale": workload.scale,
        "duration": workload.duration,
        "source": workload.source,
        "destinations": list(workload.destinations),
        "rows": sum(actions.values()),
        "actions": actions,
        "clients": clients,
    }


def remove_stale_formats(out: Path, formats: tuple[str, ...]) -> None:
    """Remove an earlier run's table in a format this run did not write: a reader
    prefers ``actions.jsonl`` when both are there, and would read the old one."""
    for name in {"parquet", "jsonl"} - set(formats):
        shutil.rmtree(out / f"actions.{name}", ignore_errors=True)
