"""``minibroker doctor --live URL``: the labs' pathologies found in a running broker.

    target = parse_target("stomp://admin:admin@127.0.0.1:61613")
    report = asyncio.run(run_live(target, window=10))
    print(format_live_text(report)); status = live_status(report)

Modules: ``target`` (the URL), ``sample`` (what a sample holds, whatever the
broker), ``read_stomp`` (ActiveMQ's statistics plugin, minibroker's statistics),
``read_http`` (RabbitMQ's management API, ActiveMQ's Jolokia), ``signatures``
(samples in, findings out: pure), ``fixes`` (write-up, fix and lab of a
finding), ``watch`` (sampling over a window, the report).
"""

from __future__ import annotations

from .sample import Connection, Consumer, Destination, Sample
from .signatures import LiveFinding, evaluate
from .target import Target, parse_target
from .watch import LiveReport, format_live_json, format_live_text, live_status, run_live

__all__ = [
    "Connection",
    "Consumer",
    "Destination",
    "LiveFinding",
    "LiveReport",
    "Sample",
    "Target",
    "evaluate",
    "format_live_json",
    "format_live_text",
    "live_status",
    "parse_target",
    "run_live",
]
