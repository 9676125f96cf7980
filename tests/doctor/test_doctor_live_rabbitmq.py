"""``doctor --live`` on a real RabbitMQ (``clients.rabbitmq``: a node of ours, stopped by pid).

A low ``vm_memory_high_watermark`` raises the memory alarm at boot: a STOMP
client that publishes and consumes on one connection is blocked, and the
doctor names the alarm and that connection. The same client on a node with
the default watermark: nothing found. Lab 05's ``shared-connection`` run as
``lab run 05 --against rabbitmq`` plays it: the doctor names the worker's
connection, blocked while it holds its unacknowledged requests. The nodes collect their statistics every
second (``collect_statistics_interval``; RabbitMQ's default is 5 s) so that the
window holds enough samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import pytest

from clients import rabbitmq
from clients.cli import main
from clients.doctor.live import LiveReport, parse_target, run_live
from clients.labs.against import LAB_VHOST
from clients.rabbitmq import RabbitMQ
from clients.stomp import StompClient, StompClientError
from tests.doctor_live_support import doctors_while_playing, lab_and_scenario

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("doctor-live-brokers")]  # one JVM or Erlang broker at a time

FRESH = {"collect_statistics_interval": "1000"}

LAB_05, SHARED = lab_and_scenario("05-shared-connection-deadlock")
#: The doctor's window over lab 05's workload: the alarm within 4 to 8 s here, then the shortest finding (5 s).
LAB_05_WINDOW = 15.0


async def _publish_and_consume(node: RabbitMQ, seconds: float) -> None:
    """One connection: a consumer of /queue/jobs that acknowledges each message, and a producer
    to it at 20 msg/s, for ``seconds``."""
    client = await StompClient.connect("127.0.0.1", node.port, login=node.user, passcode=node.password, vhost="/")
    try:
        jobs = await client.subscribe("/queue/jobs", ack="client-individual", prefetch=10)

        async def consume() -> None:
            while True:
                await client.ack(await jobs.get(timeout=None))

        consuming = asyncio.create_task(consume())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await client.send("/queue/jobs", "x" * 1000, receipt=False)
            await asyncio.sleep(0.05)
        consuming.cancel()
    finally:
        with contextlib.suppress(StompClientError, OSError):
            await client.disconnect(timeout=1)


async def _doctor_while_clients_run(node: RabbitMQ) -> LiveReport:
    url = f"http://{node.user}:{node.password}@127.0.0.1:{node.management_port}/"
    clients = asyncio.create_task(_publish_and_consume(node, 14))
    try:
        return await run_live(parse_target(url), window=12)
    finally:
        await clients


def _run(tmp_path: Path, settings: dict[str, str]) -> LiveReport:
    problem = rabbitmq.installed_problem()
    if problem:
        pytest.fail(problem)
    node = RabbitMQ(tmp_path, settings={**FRESH, **settings}, quick_stop=True)
    node.start()
    try:
        return asyncio.run(_doctor_while_clients_run(node))
    finally:
        node.stop()


def test_memory_alarm_found_with_the_blocked_connection(tmp_path: Path) -> None:
    report = _run(tmp_path, {"vm_memory_high_watermark.absolute": "20MB"})
    assert report.broker == "rabbitmq"
    found = {f.pathology: f for f in report.findings}
    assert set(found) == {"resource_alarm", "blocked_holding_unacked"}, [f.headline for f in report.findings]
    alarm = found["resource_alarm"]
    assert alarm.culprits and all(" -> 127.0.0.1:" in name for name in alarm.culprits)
    assert found["blocked_holding_unacked"].subject in alarm.culprits
    assert "vm_memory_high_watermark" in alarm.fix.text


def test_default_watermark_nothing_found_a_wrong_password_and_a_node_that_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing found on a healthy node; then, on the same node, the management API's 401 for a
    wrong password, and the node stopped while the doctor samples it: one line each, exit 2."""
    problem = rabbitmq.installed_problem()
    if problem:
        pytest.fail(problem)
    node = RabbitMQ(tmp_path, settings=FRESH, quick_stop=True)
    node.start()
    try:
        report = asyncio.run(_doctor_while_clients_run(node))
        base = f"127.0.0.1:{node.management_port}/"
        capsys.readouterr()
        refused = main(["doctor", "--live", f"http://{node.user}:wrong@{base}", "--window", "1"])
        refusal = capsys.readouterr().err
        timer = threading.Timer(2.0, node.stop)
        timer.start()
        stopped = main(["doctor", "--live", f"http://{node.user}:{node.password}@{base}", "--window", "30"])
        timer.join()
        stop = capsys.readouterr().err
    finally:
        node.stop()
    assert report.broker == "rabbitmq"
    assert report.findings == (), [f.headline for f in report.findings]
    assert refused == 2 and len(refusal.strip().splitlines()) == 1, refusal
    assert f"refused the login (user {node.user!r}): HTTP 401" in refusal
    assert stopped == 2 and len(stop.strip().splitlines()) == 1 and "Traceback" not in stop, stop
    assert "stopped answering while sampling" in stop, stop


def test_lab_05_worker_blocked_holding_its_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the lab plays it: the node's rabbitmq.conf from the lab, the alarm moved within the
    workload's reach (the node's use plus the lab's margin), the feeder, the worker that replies
    and acknowledges on one connection, the auditor. (The lab's ``separate-connections`` is no
    cure on RabbitMQ, whose alarm blocks the worker's reply connection too: it measures a
    pathology there as well, so there is no cure run to find nothing in.)"""
    problem = rabbitmq.installed_problem()
    if problem:
        pytest.fail(problem)
    # The workload gives up on a worker stuck for LIVE_STALL seconds: here it stays until the window is over.
    monkeypatch.setattr(SHARED, "LIVE_STALL", LAB_05_WINDOW + 1)
    spec = next(r for r in LAB_05.runs if r.name == "shared-connection")
    node = RabbitMQ(tmp_path, name="lab-05", settings=SHARED.rabbitmq_settings(spec.config()), quick_stop=True)
    node.start()
    try:
        node.add_vhost(LAB_VHOST)  # the virtual host the lab's clients name
        node.set_memory_high_watermark(max(node.memory_used() for _ in range(3)) + SHARED.RABBITMQ_MARGIN)
        url = f"http://{node.user}:{node.password}@127.0.0.1:{node.management_port}/"
        (report,), played = doctors_while_playing(
            [url],
            lambda: SHARED.play_on(
                node.port, lambda tags: {}, spec.name, total=SHARED.RABBITMQ_TOTAL, deadline=LAB_05_WINDOW + 2
            ),
            LAB_05_WINDOW,
        )
    finally:
        node.stop()
    # The lab's verdict: the replies stop short (the worker stuck, or its writes unread by the broker).
    assert played["replies"] < SHARED.RABBITMQ_TOTAL, played
    found = {f.pathology: f for f in report.findings}
    assert set(found) == {"resource_alarm", "blocked_holding_unacked"}, [f.headline for f in report.findings]
    worker = found["blocked_holding_unacked"]
    assert worker.subject in found["resource_alarm"].culprits
    assert worker.fix.lab == "05-shared-connection-deadlock" and worker.end - worker.start >= 5
    assert all(values["unacked"] > 0 for _, values in worker.series)
