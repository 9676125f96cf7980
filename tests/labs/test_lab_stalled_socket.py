"""Lab 03: the prefetch-stalled-socket lab, its verdicts, and the story with stomp.py.

- the lab through ``clients.labs.run_lab`` on the virtual clock: every verdict
  as promised, and the evidence numbers that make each verdict;
- stomp.py, a client we did not write, against the real server with the lab's
  configuration: a slow consumer with the default prefetch stalls its
  connection, and a reconnect with the same client-id is refused while the
  broker holds it (``minibroker stat --connections`` and the statistics
  destination show the stuck connection); with ``activemq.prefetchSize:1``
  the same workload drains;
- broker behaviour this lab found wrong at first (now fixed): each test below asserts the fix.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import stomp

from clients.cli import main as cli
from clients.labs import Lab, find_labs, load_lab, run_lab
from clients.labs.runner import RunResult
from minibroker.config import load_config, parse_config
from minibroker.edge import VirtualNetwork
from stomp_py_support import WAIT, Collector, close, connect

LAB_DIR = Path(__file__).resolve().parents[2] / "examples" / "labs" / "03-prefetch-stalled-socket"
CLIENT_ID = "perl-consumer"
BODY = "x" * 16_000
#: The stalled consumer's socket receive buffer, bytes (the kernel doubles it).
_CONSUMER_RCVBUF = 64 * 1024


def _lab() -> Lab:
    return load_lab(LAB_DIR)


@pytest.fixture(scope="module")
def virtual_results() -> dict[str, RunResult]:
    return {r.spec.name: r for r in run_lab(_lab(), out=lambda line: None)}


# ------------------------------------------------------------------ the lab
def test_lab_03_is_listed_and_keeps_every_promise(virtual_results: dict[str, RunResult]) -> None:
    assert "prefetch-stalled-socket" in [lab.name for lab in find_labs()]
    assert set(virtual_results) == {
        "default-prefetch",
        "prefetch-1",
        "prefetch-1-policy",
        "link-stealing",
        "write-timeout",
        "heart-beats",
        "exclusive",
        "shared",
    }
    for name, result in virtual_results.items():
        assert result.as_promised, (name, result.outcome.summary)
    assert cli(["lab", "run", "03"]) == 0


def test_the_pathology_evidence(virtual_results: dict[str, RunResult]) -> None:
    outcome = virtual_results["default-prefetch"].outcome
    m = outcome.metrics
    # The broker pushed what the socket took; each ACK then costs the store
    # 5 ms for every message in flight: more than half a second.
    assert m["in_flight"] > 100 and m["ack_cost_s"] > 0.5
    # The consumer's ACKs waited for seconds while the broker did not read them.
    assert m["ack_wait_max_s"] > 5
    # One ACK write was cut short; every reconnect refused; the consumer gave up.
    assert m["partial_writes"] == 1
    assert m["connects_accepted"] == 1 and m["connects_refused"] > 20
    assert m["processed"] < 50 and m["queue_left"] > 900
    text = "\n".join(outcome.evidence)
    assert "write failed part way: wrote 7 of 41 B" in text
    assert f"Client: {CLIENT_ID} already connected" in text
    # The trace's connection samples: the old connection, never read again,
    # its writes never drained, still holding its messages.
    old = next(line for line in outcome.evidence if line.startswith("the connection the consumer left"))
    unread = re.search(r"\(([\d,]+) B written to its socket and not read\)", text)
    assert unread and int(unread.group(1).replace(",", "")) > 90_000  # some 100 messages of 1000 B
    assert (
        "still held by the broker" in old and f"pending_bytes {unread.group(1)}," in old and "idle_write 70.0 s" in old
    )
    assert "gave up" in outcome.summary


@pytest.mark.parametrize("run", ["prefetch-1", "prefetch-1-policy"])
def test_prefetch_1_runs_the_same_workload_to_the_end(virtual_results: dict[str, RunResult], run: str) -> None:
    m = virtual_results[run].outcome.metrics
    assert m["in_flight"] == 1 and m["ack_cost_s"] == pytest.approx(0.010)
    assert m["ack_wait_max_s"] < 0.01
    assert m["processed"] == 1000 and m["queue_left"] == 0 and m["duplicates"] == 0
    assert m["partial_writes"] == 0 and m["connects_refused"] == 0 and m["connects_accepted"] == 1


def test_the_other_cures_end_the_refusals_but_not_the_stall(virtual_results: dict[str, RunResult]) -> None:
    steal = virtual_results["link-stealing"].outcome
    assert steal.metrics["connects_refused"] == 0 and steal.metrics["connects_accepted"] > 100
    assert "taken over by a new connection (allow_link_stealing)" in "\n".join(steal.evidence)
    # Each takeover drops the ACKs the broker had not read: messages come again.
    assert steal.metrics["duplicates"] > steal.metrics["processed"]
    timeout = virtual_results["write-timeout"].outcome
    assert "write timeout, its writes stuck for 3.0 s" in "\n".join(timeout.evidence)
    assert timeout.metrics["connects_refused"] > 0 and timeout.metrics["connects_accepted"] > 1
    beats = virtual_results["heart-beats"].outcome
    assert "heart-beat timeout" in "\n".join(beats.evidence)
    assert beats.metrics["connects_refused"] > 0 and beats.metrics["connects_accepted"] > 1
    for outcome in (steal, timeout, beats):  # none of them makes the consumer faster
        assert outcome.metrics["partial_writes"] > 1 and outcome.metrics["processed"] < 500
        assert outcome.metrics["in_flight"] > 100


def test_exclusive_takes_load_balancing_away(virtual_results: dict[str, RunResult]) -> None:
    exclusive = virtual_results["exclusive"].outcome.metrics
    shared = virtual_results["shared"].outcome.metrics
    assert (exclusive["a_share"], exclusive["b_share"], exclusive["b_after_a_left"]) == (200, 0, 100)
    assert (shared["a_share"], shared["b_share"], shared["b_after_a_left"]) == (100, 100, 100)


@pytest.mark.slow
def test_the_lab_runs_live_with_our_client() -> None:
    lab = _lab()
    keep = [s for s in lab.runs if s.name in ("default-prefetch", "prefetch-1")]
    results = {
        r.spec.name: r
        for r in run_lab(
            Lab(lab.directory, lab.name, lab.title, lab.source, tuple(keep), lab.scenario_path),
            live=True,
            out=lambda line: None,
        )
    }
    assert all(r.as_promised for r in results.values()), {
        n: (r.grade, r.outcome.summary, r.outcome.metrics) for n, r in results.items()
    }
    stalled = results["default-prefetch"].outcome
    assert stalled.metrics["stalled"] and stalled.metrics["connects_refused"] > 0
    assert stalled.metrics["in_flight"] > 100
    assert "already connected" in "\n".join(stalled.evidence)
    cured = results["prefetch-1"].outcome.metrics
    assert cured["processed"] == 400 and cured["in_flight"] == 1 and not cured["stalled"]


# ------------------------------------------------------------------ stomp.py
def _statistics(conn: Any, listener: Collector, what: str) -> list[dict[str, Any]]:
    """Ask the statistics destination (any STOMP client can) and collect the replies."""
    conn.send(f"/queue/ActiveMQ.Statistics.{what}", "", headers={"reply-to": "/temp-queue/lab03-stats"})
    first = listener.messages.get(timeout=WAIT)
    total = int(first.headers["statistics-total"])
    replies = [first] + [listener.messages.get(timeout=WAIT) for _ in range(total - 1)] if total else []
    return [json.loads(r.body) for r in replies]


class _SlowConsumer(stomp.ConnectionListener):
    """The article's consumer in stomp.py: works on each message, then ACKs it.

    ``hang()`` makes it stop where it is: its receiver thread waits in
    ``on_message`` and neither reads nor writes the socket any more.
    """

    def __init__(self, conn: Any, work: float = 0.01) -> None:
        self.conn = conn
        self.work = work
        self.acked = 0
        self.hung = threading.Event()
        self.release = threading.Event()

    def on_message(self, frame: Any) -> None:
        if self.hung.is_set():
            self.release.wait(30)
            return
        time.sleep(self.work)
        self.conn.ack(frame.headers["message-id"])
        self.acked += 1

    def hang(self) -> None:
        self.hung.set()


def _fill(broker: Any, n: int) -> None:
    producer, _ = connect(broker)
    try:
        for _ in range(n):
            producer.send("/queue/jobs", BODY, headers={"persistent": "true"})
        producer.send("/queue/jobs.done", "", headers={"receipt": "filled"})
    finally:
        close(producer)


def _slow_consumer(broker: Any, prefetch: int | None = None) -> tuple[Any, _SlowConsumer]:
    conn = stomp.Connection10([broker.address])
    consumer = _SlowConsumer(conn)
    conn.set_listener("slow", consumer)
    conn.connect(wait=True, headers={"client-id": CLIENT_ID})
    # A small receive buffer, fixed (Linux grows an unset one up to tcp_rmem's maximum, 32 MB
    # here): once the consumer hangs, what the kernel cannot hold waits in the broker.
    conn.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _CONSUMER_RCVBUF)
    headers = {"activemq.exclusive": "true"}
    if prefetch is not None:
        headers["activemq.prefetchSize"] = str(prefetch)
    conn.subscribe("/queue/jobs", id="0", ack="client", headers=headers)
    return conn, consumer


def _consumer_connection(monitor: Any, listener: Collector) -> dict[str, Any] | None:
    return next((c for c in _statistics(monitor, listener, "Connection") if c["clientId"] == CLIENT_ID), None)


@contextmanager
def _stalled(broker: Any) -> Iterator[tuple[Any, Collector, _SlowConsumer]]:
    """A stomp.py consumer stalled as in the article, then hung; yields the monitor and the consumer."""
    _fill(broker, 400)
    monitor, listener = connect(broker)
    monitor.subscribe("/temp-queue/lab03-stats", id="stats")
    conn, consumer = _slow_consumer(broker)
    try:
        deadline = time.time() + 20
        stall = None
        while time.time() < deadline and stall is None:
            time.sleep(0.2)
            c = _consumer_connection(monitor, listener)
            # The stall: the broker does not read the connection (the store is busy
            # with its ACKs) although the consumer keeps acknowledging.
            if c and c["readingPaused"] and c["secondsSinceLastRead"] >= 1.0 and c["unacknowledged"] > 100:
                stall = c
        assert stall is not None, "the consumer never stalled"
        acked = consumer.acked
        consumer.hang()
        assert acked < 400
        # The hung consumer reads no more: the broker's output to it piles up in its buffer.
        deadline = time.time() + 20
        while time.time() < deadline:
            c = _consumer_connection(monitor, listener)
            if c and c["outboundQueuedBytes"] > 0:
                break
            time.sleep(0.1)
        yield monitor, listener, consumer
    finally:
        consumer.release.set()
        with contextlib.suppress(Exception):  # the test's verdict is made; the socket may be gone
            conn.transport.disconnect_socket()
        close(monitor)


def test_stomp_py_a_stalled_consumer_is_refused_on_reconnect(broker_factory) -> None:
    broker = broker_factory(load_config(LAB_DIR / "slow-store.toml"))
    with _stalled(broker) as (monitor, listener, consumer):
        again = stomp.Connection10([broker.address])
        errors = Collector()
        again.set_listener("c", errors)
        with pytest.raises(stomp.exception.ConnectFailedException):
            again.connect(wait=True, headers={"client-id": CLIENT_ID})
        assert f"Client: {CLIENT_ID} already connected" in errors.errors[0].headers["message"]
        old = _consumer_connection(monitor, listener)
        assert old is not None, "the broker let the stuck connection go"
        assert old["unacknowledged"] > 100 and old["outboundQueuedBytes"] > 0 and old["readingPaused"]


def test_stat_connections_shows_the_stuck_connection(broker_factory, capsys) -> None:
    broker = broker_factory(load_config(LAB_DIR / "slow-store.toml"))
    with _stalled(broker):
        assert cli(["stat", "--port", str(broker.port), "--connections", "-d", "jobs"]) == 0
        out = capsys.readouterr().out
        header = next(line for line in out.splitlines() if line.startswith("connection "))
        row = next(line for line in out.splitlines() if f" {CLIENT_ID} " in line)
        fields = dict(zip(header.split(), row.split(), strict=False))
        assert int(fields["unacked"]) > 100 and fields["out-bytes"] != "0B"  # in binary units: 1.2KiB
        assert cli(["stat", "--port", str(broker.port), "--connections", "--json", "-d", "jobs"]) == 0
        data = json.loads(capsys.readouterr().out)
        stuck = next(c for c in data["connections"] if c["clientId"] == CLIENT_ID)
        assert stuck["readingPaused"] and stuck["unacknowledged"] > 100 and stuck["outboundQueuedBytes"] > 0


def test_stomp_py_prefetch_1_drains_the_same_workload(broker_factory) -> None:
    broker = broker_factory(load_config(LAB_DIR / "slow-store.toml"))
    _fill(broker, 100)
    monitor, listener = connect(broker)
    monitor.subscribe("/temp-queue/lab03-stats", id="stats")
    conn, consumer = _slow_consumer(broker, prefetch=1)
    try:
        unacked = []
        deadline = time.time() + 30
        while consumer.acked < 100 and time.time() < deadline:
            time.sleep(0.1)
            c = _consumer_connection(monitor, listener)
            if c is not None:
                unacked.append(c["unacknowledged"])
        assert consumer.acked == 100
        assert unacked and max(unacked) <= 1  # never more than one message in flight
        [jobs] = _statistics(monitor, listener, "Destination.jobs")
        deadline = time.time() + WAIT
        while jobs["size"] and time.time() < deadline:  # the last ACK may still be on its way
            time.sleep(0.05)
            [jobs] = _statistics(monitor, listener, "Destination.jobs")
        assert jobs["size"] == 0 and jobs["dequeueCount"] == 100
        conn.disconnect()
        deadline = time.time() + WAIT  # the DISCONNECT may wait behind the last ACK's store time
        while _consumer_connection(monitor, listener) is not None and time.time() < deadline:
            time.sleep(0.05)
        again, _ = connect(broker, "1.2", headers={"client-id": CLIENT_ID})  # the client-id is free again
        close(again)
    finally:
        close(conn)
        close(monitor)


# ------------------------------------------------------------------ what the lab found
def _slow_store(tmp_path: Path, messages: int, size: int) -> VirtualNetwork:
    """A virtual broker whose ACKs cost 5 ms per message in flight, with ``messages`` waiting on /queue/jobs."""
    net = VirtualNetwork(parse_config({"store": {"store_latency": 5}}), data_dir=tmp_path / "data")
    producer = net.connected_client("producer")
    for _ in range(messages):
        producer.send("/queue/jobs", "x" * size, persistent="true")
    return net


def test_heart_beats_do_not_blame_the_peer_for_the_brokers_own_pause(tmp_path: Path) -> None:
    net = _slow_store(tmp_path, 500, 200)
    c = net.client("beating")
    assert c.connect("1.2", **{"heart-beat": "1000,0"}).command == "CONNECTED"  # the broker expects a beat a second
    c.subscribe("/queue/jobs", "s", "client-individual")
    c.ack(c.messages()[0])  # 500 in flight x 5 ms: the store keeps the broker away for 2.5 s
    for _ in range(4):
        net.advance(0.5)
        if c.closed:
            break
        c.write(b"\n")  # the client beats twice as often as it promised; the broker does not read them
    assert not c.closed, c.close_reason


def test_a_connection_taken_over_is_released_even_if_its_peer_never_reads(broker_factory) -> None:
    import asyncio

    from clients.stomp import StompClient
    from minibroker.edge.connection import _CLOSE_GRACE_SECONDS

    tcp = Path("/proc/net/tcp")
    if not tcp.exists():
        pytest.skip("needs /proc/net/tcp (Linux)")
    broker = broker_factory(parse_config({"transport": {"allow_link_stealing": True}}))

    def established(local_port: int) -> bool:
        """Is the broker's end of the connection from local_port still ESTABLISHED?"""
        for line in tcp.read_text().splitlines()[1:]:
            f = line.split()
            if int(f[2].split(":")[1], 16) == local_port and int(f[1].split(":")[1], 16) == broker.port:
                return f[3] == "01"
        return False

    async def scenario() -> bool:
        producer = await StompClient.connect("127.0.0.1", broker.port)
        for i in range(300):
            await producer.send("/queue/big", BODY, receipt=i == 299)
        stuck = await StompClient.connect("127.0.0.1", broker.port, client_id="app", rcvbuf=4096, max_buffered=1)
        await stuck.subscribe("/queue/big", ack="client")  # and never reads again
        port = stuck.get_extra_info("sockname")[1]

        def stuck_writes() -> bool:  # the broker's writes to it no longer fit its socket
            return any(s.client_id == "app" and s.writing.socket_full for s in broker.server.broker.sessions.values())

        deadline = time.monotonic() + 30
        while not broker.call(stuck_writes):
            assert time.monotonic() < deadline, "the broker never filled the stuck connection's socket"
            await asyncio.sleep(0.05)
        thief = await StompClient.connect("127.0.0.1", broker.port, client_id="app")  # takes the client-id over
        # The old connection is closed at once and aborted after the close grace
        # (edge._CLOSE_GRACE_SECONDS, 5 s) if it still has not flushed: wait well past it.
        deadline = time.monotonic() + _CLOSE_GRACE_SECONDS + 10
        while established(port) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        released = not established(port)
        for c in (producer, stuck, thief):
            c.close()
        return released

    assert asyncio.run(scenario())


def test_the_write_timeout_event_counts_the_bytes_stuck_in_the_socket(tmp_path: Path) -> None:
    net = VirtualNetwork(
        parse_config({"transport": {"so_write_timeout": 1000}}), data_dir=tmp_path / "data", trace=True
    )
    producer = net.connected_client("producer")
    for _ in range(100):
        producer.send("/queue/jobs", "x" * 1000)
    c = net.client("stuck", recv_buffer=4096, auto_read=False)
    c.connect()
    c.subscribe("/queue/jobs", "s", "client")
    net.advance(2.0)
    [event] = net.trace.events("write_timeout")
    assert event["pending_bytes"] > 50_000


def test_the_virtual_network_reads_no_more_than_the_real_edge(tmp_path: Path) -> None:
    net = _slow_store(tmp_path, 200, 100)
    c = net.client("consumer", send_buffer=10_000)
    c.connect()
    c.subscribe("/queue/jobs", "s", "client-individual")
    m = c.messages()
    c.ack(m[0])  # the store is busy for 1 s: the next ACKs wait in the socket
    for i in (1, 2, 3):
        c.ack(m[i])
    net.advance(1.01)  # reading resumes: ACK 1 is handled (another second), 2 and 3 are held
    assert c.reading_paused and not c.outbound
    c.ack(m[4])
    waiting = len(c.outbound)
    net.advance(1.01)  # ACK 1 done; held ACK 2 starts at once: the edge resumes and pauses, reading nothing
    assert len(c.outbound) == waiting


def test_a_refused_reconnect_is_traced_as_the_spark_detector_expects(tmp_path: Path) -> None:
    net = VirtualNetwork(data_dir=tmp_path / "data", trace=True)
    first = net.client("first")
    assert first.connect(**{"client_id": CLIENT_ID}).command == "CONNECTED"
    second = net.client("second")
    assert second.connect(**{"client_id": CLIENT_ID}).command == "ERROR"
    [event] = [e for e in net.trace.events("error") if "already connected" in e["message"]]
    assert event.get("code") == "client_id_in_use" and event.get("client_id") == CLIENT_ID


@pytest.mark.spark
def test_the_analysis_finds_the_articles_stalled_socket(spark, tmp_path: Path) -> None:  # analyze finds the session
    from clients.labs.runner import LabRun
    from clients.spark.analyze import main as analyze

    lab = _lab()
    spec = next(s for s in lab.runs if s.name == "default-prefetch")
    run = LabRun(lab, spec, tmp_path / "run")
    assert lab.scenario().run(run).pathology
    trace = tmp_path / "trace.jsonl"
    run.trace.dump(trace)
    args = ["--no-plots", "--no-tables", "--master", "local[1]"]  # the findings are what it looks at
    assert analyze([str(trace), "--out", str(tmp_path / "out"), *args]) == 0
    findings = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert any(f["detector"] == "stalled_socket" for f in findings)
