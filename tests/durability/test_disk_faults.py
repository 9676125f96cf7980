"""The broker on a disk that fails or fills, through the storage seam (``storage.fileio``).

A failed fsync stops the broker: no RECEIPT for what it covered, an ERROR naming
the store and the error, a non-zero exit, and a restart recovers everything
receipted before. A full disk refuses (or holds back) persistent SENDs only,
and they work again when space returns.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from broker_support import RunningBroker
from clients.cli import main as cli
from clients.stomp import StompClient, StompError
from disk_faults import FaultyFileOps
from minibroker.config import BrokerConfig, parse_config
from minibroker.core import STORE_FAILED_EXIT, Shutdown
from minibroker.edge import VirtualNetwork, serve
from minibroker.errors import StoreFailure, StoreOpenError
from storage.fileio import using


def _receipts(client: Any) -> set[str]:
    return {f.headers["receipt-id"] for f in client.frames("RECEIPT")}


def _errors(client: Any) -> dict[str, str]:
    return {f.headers.get("receipt-id", ""): f.headers["message"] for f in client.frames("ERROR")}


# -- the core, on the virtual network, with real journals ---------------------------------------------


def _five_receipted(data_dir: Path) -> tuple[VirtualNetwork, Any]:
    """A broker on ``data_dir`` and a producer whose five persistent messages were receipted."""
    net = VirtualNetwork(data_dir=data_dir)
    producer = net.connected_client("p")
    for i in range(5):
        producer.send("/queue/orders", f"durable {i}", persistent="true", receipt=f"ok{i}")
    assert _receipts(producer) == {f"ok{i}" for i in range(5)}
    return net, producer


def test_a_failed_fsync_gives_no_receipt_for_what_it_covered_and_stops_the_broker(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net, producer = _five_receipted(tmp_path)
        ops.fail("fsync", errno.EIO)  # the next fsync fails, once; the one after would succeed
        producer.send("/queue/orders", "covered", persistent="true", receipt="lost")
        assert "lost" not in _receipts(producer)
        errors = _errors(producer)
        assert re.search(
            r'Store "journal" failed: fsync of .*db-\d+\.log: \[Errno 5\] Input/output error', errors["lost"]
        )
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        # A later fsync would succeed, but proves nothing: no persistent SEND is receipted again.
        producer.send("/queue/orders", "after", persistent="true", receipt="after")
        assert "after" not in _receipts(producer)
        assert 'Store "journal" failed' in _errors(producer)["after"]
        assert net.broker.store_state == "failed"
        net.restart()  # the failed store is closed without a sync; the journal is recovered
    consumer = net.connected_client("c")
    consumer.subscribe("/queue/orders")
    bodies = consumer.bodies()
    assert [b for b in bodies if b.startswith(b"durable")] == [f"durable {i}".encode() for i in range(5)]
    assert b"after" not in bodies


def test_eio_on_a_journal_write_refuses_the_send_and_stops_the_broker(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path)
        producer = net.connected_client("p")
        producer.send("/queue/orders", "before", persistent="true", receipt="r0")
        ops.fail("pwrite", errno.EIO, short=9)
        producer.send("/queue/orders", "torn", persistent="true", receipt="r1")
        assert "r1" not in _receipts(producer)
        assert "Input/output error" in _errors(producer)["r1"]
        assert net.shutdown is not None
        net.restart()
    consumer = net.connected_client("c")
    consumer.subscribe("/queue/orders")
    assert consumer.bodies() == [b"before"]


def test_eio_reading_a_message_back_from_the_journal_is_an_error_naming_it_and_stops_the_broker(
    tmp_path: Path,
) -> None:
    """A page-in's read fails (EIO): the consumer whose SUBSCRIBE asked for it gets an
    ERROR naming the store, the file and the error (not "internal error"), and the
    broker stops (it cannot prove the read lost nothing); a restart without the fault
    delivers every message."""
    ops = FaultyFileOps()
    with using(ops):
        net, _ = _five_receipted(tmp_path)
        net.restart()  # the messages are in the journal only: a consumer pages them in
        ops.fail("pread", errno.EIO)
        consumer = net.connected_client("c")
        consumer.subscribe("/queue/orders", receipt="sub")
        [error] = consumer.frames("ERROR")
        assert re.search(
            r'Store "journal" failed: reading .*db-\d+\.log: \[Errno 5\] Input/output error', error.headers["message"]
        ), error.headers["message"]
        assert "internal error" not in error.headers["message"] and consumer.bodies() == []
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        net.restart()
    consumer = net.connected_client("c2")
    consumer.subscribe("/queue/orders")
    assert consumer.bodies() == [f"durable {i}".encode() for i in range(5)]


class RottenReads(FaultyFileOps):
    """Reads of the journal's files that come back with one byte changed, once ``rot`` is set."""

    rot = False

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        data = super().pread(fd, length, offset)
        if self.rot and self._paths.get(fd, "").endswith(".log") and data:
            return data[:-1] + bytes([data[-1] ^ 0xFF])
        return data


def test_a_message_read_back_damaged_from_the_journal_is_an_error_naming_it_and_stops_the_broker(
    tmp_path: Path,
) -> None:
    """A page-in reads a record whose bytes fail its checksum: as for a read error, the
    consumer gets an ERROR naming the store, the file and what is wrong (not "internal
    error") and the broker stops; a restart, reading the intact file, delivers all."""
    ops = RottenReads()
    with using(ops):
        net, _ = _five_receipted(tmp_path)
        net.restart()  # the messages are in the journal only: a consumer pages them in
        ops.rot = True
        consumer = net.connected_client("c")
        consumer.subscribe("/queue/orders", receipt="sub")
        [error] = consumer.frames("ERROR")
        assert re.search(r'Store "journal" failed: reading .*db-\d+\.log: ', error.headers["message"]), error.headers[
            "message"
        ]
        assert "internal error" not in error.headers["message"] and consumer.bodies() == []
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        ops.rot = False
        net.restart()
    consumer = net.connected_client("c2")
    consumer.subscribe("/queue/orders")
    assert consumer.bodies() == [f"durable {i}".encode() for i in range(5)]


def test_eio_reading_a_message_back_for_a_consumer_whose_socket_drained_stops_the_broker(tmp_path: Path) -> None:
    """The page-in that fails is not a frame's (the consumer's socket drained, and
    dispatch to it resumed): the broker stops all the same, it does not walk past it."""
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path)
        producer = net.connected_client("p")
        for i in range(600):
            producer.send("/queue/orders", b"%d." % i + b"x" * 1000, persistent="true")
        net.restart()  # in the journal only: pages of 200 come in as the consumer takes them
        consumer = net.client("c", recv_buffer=16 * 1024, auto_read=False)
        consumer.connect()
        consumer.read()
        consumer.subscribe("/queue/orders", "s")  # auto: only its socket's buffer bounds what it is sent
        ops.fail("pread", errno.EIO, times=10**6)  # from now on, every read of a record fails
        while net.shutdown is None and not consumer.closed:
            if not consumer.read():
                break
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        assert "reading" in net.shutdown.reason and "Input/output error" in net.shutdown.reason


def test_eio_reading_a_message_back_for_a_cursor_that_waited_for_memory_stops_the_broker(tmp_path: Path) -> None:
    """The page-in that fails runs after an event, not in a frame: a queue's cursor
    waited for broker memory, and another consumer's messages freed it. The broker
    stops with the read error (it does not let ``StoreFailed`` escape to the edge)."""
    config = parse_config(
        {
            "system_usage": {"memory_limit": "200 kb"},
            "destination_policy": [{"queue": "hold", "pending_cursor": "vm", "producer_flow_control": False}],
        }
    )
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(config, data_dir=tmp_path)
        producer = net.connected_client("p")
        for i in range(5):
            producer.send("/queue/orders", f"durable {i}", persistent="true", receipt=f"ok{i}")
        net.restart()  # the orders are in the journal only
        producer = net.connected_client("p")
        sent = 0
        while net.broker.memory.percent < 100:  # non-persistent messages fill the broker's memory
            producer.send("/queue/hold", b"h" * 4000, receipt=f"h{sent}")
            sent += 1
            assert sent < 1000
        consumer = net.connected_client("c")
        consumer.subscribe("/queue/orders", receipt="sub")
        assert "sub" in _receipts(consumer) and consumer.bodies() == []  # its cursor waits for memory
        ops.fail("pread", errno.EIO, times=10**6)  # from now on, every read of a record fails
        drain = net.connected_client("d")
        drain.subscribe("/queue/hold")  # frees the memory: the orders' cursor pages in after this frame
        assert len(drain.bodies()) == sent
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        assert re.search(r"reading .*db-\d+\.log: \[Errno 5\] Input/output error", net.shutdown.reason)
        assert net.broker.store_state == "failed"
    net.restart()  # on a healthy disk
    consumer = net.connected_client("c2")
    consumer.subscribe("/queue/orders")
    assert consumer.bodies() == [f"durable {i}".encode() for i in range(5)]


def test_a_failed_write_of_the_durable_subscriptions_stops_the_broker(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path)
        client = net.client("c")
        client.connect(client_id="alice")
        ops.fail("replace", errno.EIO, path="durable-subscriptions")  # the rename fails
        client.subscribe("/topic/news", "s1", **{"activemq.subscriptionName": "news", "receipt": "sub"})
        assert "sub" not in _receipts(client)
        assert re.search(r'Store "durable-subscriptions.json" failed: .*Input/output error', _errors(client)["sub"])
        assert net.shutdown is not None
        net.restart()
    assert net.broker.store_state == "ok"


def test_saving_the_durable_subscriptions_fsyncs_the_file_then_the_directory(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path)
        client = net.client("c")
        client.connect(client_id="alice")
        client.subscribe("/topic/news", "s1", **{"activemq.subscriptionName": "news"})
    calls = [c for c in ops.calls if c[0] in ("fsync", "replace", "fsync_directory")]
    at = calls.index(("replace", str(tmp_path / "durable-subscriptions.json")))
    assert calls[at - 1][0] == "fsync" and calls[at + 1] == ("fsync_directory", str(tmp_path))


def _full_disk_config(**policy: Any) -> BrokerConfig:
    return parse_config(
        {"store": {"journal_max_file_length": 64 * 1024}, "destination_policy": [{"queue": ">", **policy}]}
    )


def test_a_full_disk_refuses_persistent_sends_until_acks_free_space(tmp_path: Path) -> None:
    ops = FaultyFileOps(free=3 * 64 * 1024)
    with using(ops):
        net = VirtualNetwork(_full_disk_config(send_fail_if_no_space=True), data_dir=tmp_path)
        producer = net.connected_client("p")
        sent = 0
        while not producer.frames("ERROR"):
            producer.send("/queue/orders", "m" * 1000, persistent="true", receipt=f"r{sent}")
            sent += 1
        refused = _errors(producer)[f"r{sent - 1}"]
        assert 'Store "journal" has no space left' in refused and "No space left on device" in refused
        assert net.broker.store_state == "full"
        # Non-persistent messages go on.
        producer.send("/queue/orders", "light", receipt="np")
        assert "np" in _receipts(producer)
        # Consumers receive and acknowledge; their acks are written and free files.
        consumer = net.connected_client("c")
        consumer.subscribe("/queue/orders", ack="client-individual")
        for message in consumer.messages():
            consumer.ack(message)
        assert len(consumer.messages()) == sent  # every receipted one and the non-persistent one
        assert net.broker.store_state == "ok"
        producer.send("/queue/orders", "again", persistent="true", receipt="again")
        assert "again" in _receipts(producer)


# -- the real server -----------------------------------------------------------------------------------


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_server_stops_with_a_non_zero_status_when_an_fsync_fails_and_a_restart_recovers(tmp_path: Path) -> None:
    """``minibroker serve`` itself (its command in a thread, the seam installed):
    ERRORs instead of RECEIPTs, a CRITICAL line, an orderly stop, exit status 3."""
    data = tmp_path / "data"
    ops = FaultyFileOps()
    records: list[logging.LogRecord] = []
    listening = threading.Event()

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            if "listening on" in record.getMessage():
                listening.set()

    handler = Capture()
    logger = logging.getLogger("minibroker")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    status: list[int] = []
    try:
        with using(ops):
            thread = threading.Thread(
                target=lambda: status.append(
                    cli(
                        [
                            "serve",
                            "--port",
                            "0",
                            "--websocket-port",
                            "0",
                            "--console-port",
                            "0",
                            "--data-dir",
                            str(data),
                            "--log-level",
                            "info",
                        ]
                    )
                ),
                daemon=True,
            )
            thread.start()
            assert listening.wait(30)
            port = int(
                re.search(
                    r":(\d+) ", next(r.getMessage() for r in records if "listening on" in r.getMessage()) + " "
                ).group(1)
            )  # type: ignore[union-attr]

            async def produce() -> tuple[list[int], dict[int, str]]:
                client = await StompClient.connect(port=port)
                receipted = []
                for i in range(20):
                    await client.send("/queue/orders", f"m{i}", headers={"persistent": "true"}, receipt=True)
                    receipted.append(i)
                ops.fail("fsync", errno.EIO)
                refused: dict[int, str] = {}
                for i in range(20, 30):
                    try:
                        await client.send(
                            "/queue/orders", f"m{i}", headers={"persistent": "true"}, receipt=True, timeout=10
                        )
                        receipted.append(i)
                    except StompError as exc:
                        refused[i] = exc.message
                    except Exception:  # noqa: BLE001 - the broker stopped under us
                        break
                client.close()
                return receipted, refused

            receipted, refused = _run(produce())
            thread.join(30)
            assert not thread.is_alive()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert status == [STORE_FAILED_EXIT]
    assert receipted == list(range(20))  # not one RECEIPT after the failed fsync
    assert refused and all("Input/output error" in text and 'Store "journal"' in text for text in refused.values())
    assert any(r.levelno == logging.CRITICAL and "fsync" in r.getMessage() for r in records)
    # The restart recovers every message receipted before.
    broker = RunningBroker(BrokerConfig(), data_dir=str(data)).start()
    try:

        async def drain() -> list[int]:
            client = await StompClient.connect(port=broker.port)
            sub = await client.subscribe("/queue/orders")
            got = []
            while True:
                try:
                    got.append(int((await sub.get(timeout=2)).body[1:]))
                except TimeoutError:
                    break
            await client.disconnect()
            return got

        got = _run(drain())
    finally:
        broker.stop()
    assert set(range(20)) <= set(got)


def test_live_broker_reports_the_failure_to_its_runner(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        broker = RunningBroker(BrokerConfig(), data_dir=str(tmp_path)).start()

        async def produce() -> None:
            client = await StompClient.connect(port=broker.port)
            ops.fail("fsync", errno.EIO, times=1000)  # every fsync fails from now on
            with pytest.raises(StompError, match='Store "journal" failed'):
                await client.send("/queue/orders", "x", headers={"persistent": "true"}, receipt=True, timeout=10)
            client.close()

        _run(produce())
        broker._thread.join(30)  # type: ignore[union-attr]  # it stops on its own
        with pytest.raises(StoreFailure):
            broker.stop()


def test_the_full_disk_cycle_on_the_real_server(tmp_path: Path) -> None:
    """Fill the disk, be refused, keep consuming, see ``stat`` say so, then get space back
    twice: from acks that free journal files, and from the operator."""
    ops = FaultyFileOps(free=3 * 64 * 1024)
    with using(ops):
        broker = RunningBroker(_full_disk_config(send_fail_if_no_space=True), data_dir=str(tmp_path)).start()
        try:

            async def cycle() -> None:
                producer = await StompClient.connect(port=broker.port)
                sent = 0
                with pytest.raises(StompError) as refused:
                    while True:
                        await producer.send(
                            "/queue/orders", "m" * 1000, headers={"persistent": "true"}, receipt=True, timeout=10
                        )
                        sent += 1
                assert 'Store "journal" has no space left' in refused.value.message
                await producer.send("/queue/orders", "light", receipt=True, timeout=10)  # non-persistent goes on
                consumer = await StompClient.connect(port=broker.port)
                sub = await consumer.subscribe("/queue/orders", ack="client-individual")
                for _ in range(sent + 1):
                    message = await sub.get(timeout=10)
                    await consumer.ack(message, receipt=True, timeout=10)
                # The acks freed journal files: persistent sends work again, no restart.
                await producer.send(
                    "/queue/orders", "after acks", headers={"persistent": "true"}, receipt=True, timeout=10
                )
                assert (await sub.get(timeout=10)).body == b"after acks"
                # Fill it again; then the operator frees space.
                with pytest.raises(StompError):
                    while True:
                        await producer.send(
                            "/queue/orders", "n" * 1000, headers={"persistent": "true"}, receipt=True, timeout=10
                        )
                ops.free = None
                deadline = time.monotonic() + 30
                while True:  # refused until the broker tries the disk again (at most a second later)
                    try:
                        await producer.send(
                            "/queue/orders", "space is back", headers={"persistent": "true"}, receipt=True, timeout=10
                        )
                        break
                    except StompError:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.1)
                await producer.disconnect()
                await consumer.disconnect()

            _run(cycle())
        finally:
            broker.stop()


def test_stat_says_the_store_is_full(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ops = FaultyFileOps(free=2 * 64 * 1024)
    with using(ops):
        broker = RunningBroker(_full_disk_config(send_fail_if_no_space=True), data_dir=str(tmp_path)).start()
        try:

            async def fill() -> None:
                producer = await StompClient.connect(port=broker.port)
                with pytest.raises(StompError):
                    while True:
                        await producer.send(
                            "/queue/orders", "m" * 1000, headers={"persistent": "true"}, receipt=True, timeout=10
                        )
                await producer.disconnect()

            _run(fill())
            assert cli(["stat", "--port", str(broker.port)]) == 0
            out = capsys.readouterr().out
            assert re.search(r'store \d+% \(FULL: Store "journal" has no space left', out)
        finally:
            broker.stop()


def test_a_full_disk_holds_producers_back_under_flow_control_until_acks_free_space(tmp_path: Path) -> None:
    ops = FaultyFileOps(free=3 * 64 * 1024)
    with using(ops):
        net = VirtualNetwork(_full_disk_config(), data_dir=tmp_path)
        producer = net.connected_client("p")
        sent = 0
        while len(_receipts(producer)) == sent:
            producer.send("/queue/orders", "m" * 1000, persistent="true", receipt=f"r{sent}")
            sent += 1
            assert sent < 1000
        waiting = f"r{sent - 1}"
        assert not producer.frames("ERROR")  # held back, not refused
        assert net.broker.store_state == "full"
        consumer = net.connected_client("c")
        consumer.subscribe("/queue/orders", ack="client-individual")
        for message in consumer.messages():
            consumer.ack(message)
        net.advance(0)
        assert waiting in _receipts(producer)  # in once the acks freed a file


def test_non_persistent_messages_stay_in_memory_when_the_temp_store_has_no_space(tmp_path: Path) -> None:
    """A file cursor that cannot spill keeps its messages in memory, in order."""
    config = parse_config(
        {
            "system_usage": {"memory_limit": "1 mb"},
            "destination_policy": [
                {"queue": ">", "pending_cursor": "file", "cursor_memory_high_water_mark": 5},
                {"topic": ">", "pending_cursor": "file", "cursor_memory_high_water_mark": 5},
            ],
        }
    )
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(config, data_dir=tmp_path)
        ops.free = 0  # not one block to spare from now on
        subscriber = net.connected_client("s")
        subscriber.subscribe("/topic/news", ack="client-individual", **{"activemq.prefetchSize": "1"})
        producer = net.connected_client("p")
        for i in range(60):
            producer.send("/queue/orders", f"q{i:02d}" + "x" * 1000, receipt=f"q{i}")
            producer.send("/topic/news", f"t{i:02d}" + "x" * 1000, receipt=f"t{i}")
        assert _receipts(producer) == {f"{kind}{i}" for kind in "qt" for i in range(60)}
        assert not producer.frames("ERROR") and net.broker.store_state == "ok"
        consumer = net.connected_client("c")
        consumer.subscribe("/queue/orders")
        assert [b[:3] for b in consumer.bodies()] == [f"q{i:02d}".encode() for i in range(60)]
        received = []
        while len(received) < 60:
            [message] = subscriber.messages()[len(received) :][:1]
            received.append(message.body[:3])
            subscriber.ack(message)
        assert received == [f"t{i:02d}".encode() for i in range(60)]


def _spilling_config() -> BrokerConfig:
    """Non-persistent messages past a small part of memory spill to the temp store."""
    return parse_config(
        {
            "system_usage": {"memory_limit": "1 mb"},
            "destination_policy": [
                {"queue": ">", "pending_cursor": "file", "cursor_memory_high_water_mark": 5},
                {"topic": ">", "pending_cursor": "file", "cursor_memory_high_water_mark": 5},
            ],
        }
    )


def test_a_temp_store_read_that_fails_tells_the_consumer_and_stops_the_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-persistent message spilled to the temp store cannot be read back: it is
    not skipped in silence. The consumer whose SUBSCRIBE needed it gets an ERROR
    naming the temp store, the file and the error, the log says it CRITICAL, and
    the broker stops (the disk under it is failing)."""
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(_spilling_config(), data_dir=tmp_path)
        producer = net.connected_client("p")
        for i in range(60):
            producer.send("/queue/orders", f"q{i:02d}" + "x" * 1000, receipt=f"q{i}")
        assert _receipts(producer) == {f"q{i}" for i in range(60)}
        assert net.broker.temp_usage.usage > 0  # spilled
        ops.fail("pread", errno.EIO, path="tmp-", times=10**6)
        consumer = net.connected_client("c")
        with caplog.at_level(logging.CRITICAL, logger="minibroker"):
            consumer.subscribe("/queue/orders", receipt="sub")
        [error] = consumer.frames("ERROR")
        assert re.search(
            r'Store "temp store" failed: reading .*tmp-\d+\.data: \[Errno 5\] Input/output error',
            error.headers["message"],
        ), error.headers["message"]
        assert any(
            'Store "temp store" failed' in r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL
        )
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        net.restart()


def test_a_topic_subscription_spool_read_that_fails_stops_the_broker(tmp_path: Path) -> None:
    """The same for a topic subscription's messages spooled to the temp store, read back
    as the subscriber acks (after its frame: the broker stops all the same)."""
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(_spilling_config(), data_dir=tmp_path)
        subscriber = net.connected_client("s")
        subscriber.subscribe("/topic/news", ack="client-individual", **{"activemq.prefetchSize": "1"})
        producer = net.connected_client("p")
        for i in range(60):
            producer.send("/topic/news", f"t{i:02d}" + "x" * 1000, receipt=f"t{i}")
        assert net.broker.temp_usage.usage > 0  # spooled
        ops.fail("pread", errno.EIO, path="tmp-", times=10**6)
        for _ in range(60):
            messages = subscriber.messages()
            if net.shutdown is not None or not messages:
                break
            subscriber.ack(messages[-1])
        assert isinstance(net.shutdown, Shutdown) and net.shutdown.exit_status == STORE_FAILED_EXIT
        assert 'Store "temp store" failed: reading' in net.shutdown.reason
        net.restart()


def _refused_start(data_dir: Path, ops: FaultyFileOps, capsys: pytest.CaptureFixture[str], toml: str = "") -> str:
    """Start a broker on ``data_dir`` (with the ``toml`` config) through ``ops``: it must
    refuse (``StoreOpenError``, which ``minibroker serve`` reports on one line with exit
    status 2). Returns that line."""
    config_file = data_dir.parent / "refused.toml"
    config_file.write_text(f'{toml}\n[broker]\ndata_dir = "{data_dir}"\n')
    doc = tomllib.loads(config_file.read_text())
    config = parse_config({**doc, "transport": {"port": 0, "websocket_port": 0}, "console": {"port": 0}})
    with using(ops):
        with pytest.raises(StoreOpenError):  # a start that went ahead is stopped at once: no hang
            _run(serve(config, ready=lambda server: server.stop.set()))
        ports = ["--port", "0", "--websocket-port", "0", "--console-port", "0"]
        assert cli(["serve", "--config", str(config_file), *ports]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_read_that_fails_at_start_refuses_to_start_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recovery reads through the seam: an EIO reading a journal file at start is no
    half-recovered broker but a refusal naming the file and the error (exit 2); the
    next start on a healthy disk recovers everything."""
    net, _ = _five_receipted(tmp_path)
    net.broker.close()
    ops = FaultyFileOps()
    ops.fail("pread", errno.EIO, path="db-", times=10**6)
    err = _refused_start(tmp_path, ops, capsys)
    assert re.search(r"reading .*db-\d+\.log: \[Errno 5\] Input/output error", err), err
    again = VirtualNetwork(data_dir=tmp_path)
    consumer = again.connected_client("c")
    consumer.subscribe("/queue/orders")
    assert consumer.bodies() == [f"durable {i}".encode() for i in range(5)]


def test_a_durable_subscriptions_file_that_cannot_be_read_at_start_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    net = VirtualNetwork(data_dir=tmp_path)
    client = net.client("c")
    client.connect(client_id="alice")
    client.subscribe("/topic/news", "s1", **{"activemq.subscriptionName": "news", "receipt": "sub"})
    assert "sub" in _receipts(client)
    net.broker.close()
    ops = FaultyFileOps()
    ops.fail("pread", errno.EIO, path="durable", times=10**6)
    err = _refused_start(tmp_path, ops, capsys)
    assert re.search(r"reading .*durable\S*: \[Errno 5\] Input/output error", err), err


def test_a_ring_journal_name_file_that_cannot_be_read_at_start_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    net = VirtualNetwork(
        parse_config({"store": {"layout": "ring", "file_count": 4, "file_size": "64 kb"}}), data_dir=data_dir
    )
    producer = net.connected_client("p")
    producer.send("/queue/orders", "kept", persistent="true", receipt="r")
    assert "r" in _receipts(producer)
    net.broker.close()
    ops = FaultyFileOps()
    ops.fail("pread", errno.EIO, path="NAME", times=10**6)
    toml = '[store]\nlayout = "ring"\nfile_count = 4\nfile_size = "64 kb"\n'
    err = _refused_start(data_dir, ops, capsys, toml)
    assert re.search(r"reading .*NAME\S*: \[Errno 5\] Input/output error", err), err


def test_no_receipt_for_a_durable_subscription_copy_the_full_disk_refused(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(_full_disk_config(), data_dir=tmp_path)
        subscriber = net.client("s")
        subscriber.connect(client_id="alice")
        subscriber.subscribe("/topic/news", "s1", **{"activemq.subscriptionName": "news"})
        subscriber.disconnect()  # offline: its copies go to the journal
        producer = net.connected_client("p")
        producer.send("/topic/news", "kept", persistent="true", receipt="kept")
        ops.fail("fallocate", errno.ENOSPC, times=10_000)
        ops.fail("pwrite", errno.ENOSPC, times=10_000)
        producer.send("/topic/news", "lost", persistent="true", receipt="refused")
        assert "kept" in _receipts(producer) and "refused" not in _receipts(producer)
        assert "no space left" in _errors(producer)["refused"]


def test_the_trace_records_a_full_and_a_failed_store_as_error_events(tmp_path: Path) -> None:
    from minibroker.trace import validate_event

    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(_full_disk_config(send_fail_if_no_space=True), data_dir=tmp_path, trace=True)
        producer = net.connected_client("p")
        ops.fail("pwrite", errno.ENOSPC, path="db-")
        producer.send("/queue/orders", "refused", persistent="true", receipt="full")
        ops.fail("fsync", errno.EIO)
        net.advance(2)  # the disk is tried again
        producer.send("/queue/orders", "covered", persistent="true", receipt="failed")
    errors = [e for e in net.trace.events() if e["event"] == "error"]
    assert {e.get("code") for e in errors} >= {"store_full", "store_failed"}
    assert all(validate_event(e) == [] for e in errors)


def test_a_send_cut_short_by_a_full_disk_is_never_delivered_even_after_a_restart(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(_full_disk_config(send_fail_if_no_space=True), data_dir=tmp_path)
        producer = net.connected_client("p")
        producer.send("/queue/orders", "whole 1", persistent="true", receipt="r1")
        ops.fail("pwrite", errno.ENOSPC, short=500, path="db-")  # most of the record reaches the file
        producer.send("/queue/orders", "half-written " * 50, persistent="true", receipt="cut")
        assert "no space left" in _errors(producer)["cut"]
        net.advance(2)  # the disk is tried again, and has room
        producer.send("/queue/orders", "whole 2", persistent="true", receipt="r2")
        assert {"r1", "r2"} <= _receipts(producer)
        net.restart()
    assert [j.recovery.outcome for j in net.broker.store.journals()] == ["clean"]  # no stray bytes were left
    consumer = net.connected_client("c")
    consumer.subscribe("/queue/orders")
    assert consumer.bodies() == [b"whole 1", b"whole 2"]


def test_a_failed_rename_of_a_ring_journal_name_file_stops_the_broker(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(parse_config({"store": {"layout": "ring"}}), data_dir=tmp_path)
        producer = net.connected_client("p")
        producer.send("/queue/first", "kept", persistent="true", receipt="kept")
        ops.fail("replace", errno.EIO, path="NAME")  # the new queue's journal cannot be named
        producer.send("/queue/second", "refused", persistent="true", receipt="refused")
        assert "kept" in _receipts(producer) and "refused" not in _receipts(producer)
        assert re.search(
            r'Store "/queue/second" failed: creating its journal: \[Errno 5\]', _errors(producer)["refused"]
        )
        assert net.shutdown is not None
        net.restart()
    consumer = net.connected_client("c")
    consumer.subscribe("/queue/first")
    assert consumer.bodies() == [b"kept"]
