"""``doctor --live`` on the real server in lab 00's restart run: the starving consumer, and its cure.

Lab 00's workload (its scenario's constants): persistent messages on /queue/A
with no consumer, a restart on the same data, then a consumer-less backlog on
/queue/B.1 (more than the cursor mark of the broker's 4 MB) and a consumer on
/queue/A. With the legacy space check and no destination limit (``legacy.toml``),
A's consumer gets nothing and the doctor must name B.1 as what holds the
memory; with the cure (``cure.toml``: the B queues' own memory limit, two
backlogs as the lab's restart-cure run) it finds nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clients.doctor.live import LiveReport, parse_target, run_live
from clients.labs.model import labs_directory, load_lab
from clients.stomp import StompClient
from minibroker.config import load_config
from tests.broker_support import RunningBroker

pytestmark = pytest.mark.slow

LAB = load_lab(labs_directory() / "00-starving-consumers")
SCENARIO = LAB.scenario()


async def _send(port: int, destination: str, count: int, body: str) -> None:
    async with await StompClient.connect(port=port) as producer:
        for i in range(count):
            await producer.send(destination, body, {"persistent": "true"}, receipt=i == count - 1)


async def _doctor_with_a_consumer_on_a(port: int) -> LiveReport:
    async with await StompClient.connect(port=port) as consumer:
        await consumer.subscribe("/queue/A")
        return await run_live(parse_target(f"stomp://127.0.0.1:{port}"), window=7)


def _restart_run(config_file: str, data_dir: Path, backlogs: int) -> LiveReport:
    broker = RunningBroker(load_config(LAB.directory / config_file), data_dir=str(data_dir)).start()
    try:
        asyncio.run(_send(broker.port, "/queue/A", SCENARIO.A_MESSAGES, "a"))
        broker.restart()
        for name in SCENARIO.b_queues(backlogs):
            asyncio.run(_send(broker.port, f"/queue/{name}", SCENARIO.B_MESSAGES, SCENARIO.BODY))
        return asyncio.run(_doctor_with_a_consumer_on_a(broker.port))
    finally:
        broker.stop()


def test_starving_consumer_found_with_what_holds_the_memory(tmp_path: Path) -> None:
    report = _restart_run("legacy.toml", tmp_path, backlogs=1)
    assert [(f.pathology, f.subject) for f in report.findings] == [("starved_consumer", "/queue/A")]
    finding = report.findings[0]
    assert finding.culprits == ("/queue/B.1",)
    assert finding.fix.lab == "00-starving-consumers" and 'queue = "B.1"' in finding.fix.text
    assert all(values["received"] == 0 and values["backlog"] > 0 for _, values in finding.series)


def test_destination_limit_cure_nothing_found(tmp_path: Path) -> None:
    report = _restart_run("cure.toml", tmp_path, backlogs=2)
    assert report.findings == (), [f.headline for f in report.findings]
