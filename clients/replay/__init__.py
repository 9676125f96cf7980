"""The replay driver: play an action table against any STOMP broker.

    from clients.replay import ReplayOptions, replay
    report = await replay("out/tiny", ReplayOptions(port=61613, speed=2), trace="client.jsonl")
    print(report.render(source="out/tiny", target="127.0.0.1:61613", speed=2, trace=None))

Modules: ``options`` (how to replay), ``source`` (finding and checking the
action table), ``driver`` (the scheduler, counting and tracing), ``actor``
(one client: its connection, its actions in order, its consumers), ``stats`` (histograms, counters,
errors), ``report`` (the summary), ``progress`` (the terminal bar). The
design is described in docs/replay.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from clients.spark.actions import Action
from minibroker.trace import Trace

from .driver import Replayer
from .options import RECEIPT_MODES, ReplayOptions
from .progress import Progress
from .report import ReplayReport
from .source import ActionTable, ReplayError, open_table, parse_shard, shard

__all__ = [
    "replay",
    "Replayer",
    "ReplayOptions",
    "ReplayReport",
    "ReplayError",
    "ActionTable",
    "open_table",
    "shard",
    "parse_shard",
    "Progress",
    "RECEIPT_MODES",
]


async def replay(
    actions: str | Path | Iterable[Action], options: ReplayOptions, *, trace: str | Path | None = None
) -> ReplayReport:
    """Play an action table (a path, or actions in time order) and return the report.

    ``trace`` names a client-side trace file to write (epoch-second clock).
    """
    table: ActionTable | None = None
    rows: Iterable[Action]
    if isinstance(actions, (str, Path)):
        table = open_table(actions)
        rows = table.actions()
    else:
        rows = actions
    name = options.broker_name or f"{options.host}:{options.port}"
    writer = Trace(trace, time.time, broker=name) if trace is not None else None
    try:
        return await Replayer(options, trace=writer).run(rows)
    finally:
        if writer is not None:
            writer.close()
        if table is not None:
            table.close()
