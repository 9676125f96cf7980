"""``doctor --live`` on the real server: a consumer whose prefetch fills while it acknowledges slowly.

Lab 03's consumer (a backlog on a queue, client acknowledgements, one a second
at most) with a prefetch of 10: it holds all ten unacknowledged while it
acknowledges one a second, and the doctor names it. The same consumer with
the lab's cure, a prefetch of 1, takes one message at a time: nothing found.
"""

from __future__ import annotations

import asyncio

import pytest

from clients.doctor.live import LiveReport, parse_target, run_live
from clients.stomp import StompClient
from minibroker.config import BrokerConfig
from tests.broker_support import RunningBroker

pytestmark = pytest.mark.slow


async def _slow_consumer_while_the_doctor_samples(port: int, prefetch: int) -> LiveReport:
    async with await StompClient.connect(port=port) as producer:
        for i in range(100):
            await producer.send("/queue/work", f"job {i}", receipt=i == 99)
    async with await StompClient.connect(port=port) as consumer:
        jobs = await consumer.subscribe("/queue/work", ack="client-individual", prefetch=prefetch)

        async def work() -> None:
            while True:
                message = await jobs.get(timeout=None)
                await asyncio.sleep(1.0)  # a job takes a second
                await consumer.ack(message)

        working = asyncio.create_task(work())
        try:
            return await run_live(parse_target(f"stomp://127.0.0.1:{port}"), window=7)
        finally:
            working.cancel()


def _run(prefetch: int) -> LiveReport:
    broker = RunningBroker(BrokerConfig()).start()
    try:
        return asyncio.run(_slow_consumer_while_the_doctor_samples(broker.port, prefetch))
    finally:
        broker.stop()


def test_prefetch_full_while_acknowledging_one_a_second() -> None:
    report = _run(prefetch=10)
    assert [f.pathology for f in report.findings] == ["prefetch_full_slow_acks"], [f.headline for f in report.findings]
    finding = report.findings[0]
    assert all(values["unacked"] == 10 and values["acked"] <= 1 for _, values in finding.series)
    assert finding.fix.lab == "03-prefetch-stalled-socket" and "queue_prefetch = 1" in finding.fix.text


def test_prefetch_of_one_nothing_found() -> None:
    report = _run(prefetch=1)
    assert report.findings == (), [f.headline for f in report.findings]
