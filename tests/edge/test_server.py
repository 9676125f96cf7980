"""The asyncio edge: a real process, signals, many connections, a non-reading client."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker_support import patches_a_core_object, start_broker_process
from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode

CONNECT = b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00"


def start_process(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    return start_broker_process(tmp_path / "data", *extra)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_process_shuts_down_cleanly_on_signal(tmp_path: Path, sig: int) -> None:
    proc, port = start_process(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(CONNECT)
            assert s.recv(4096).startswith(b"CONNECTED")
            proc.send_signal(sig)
            # The broker closes our connection as it shuts down.
            s.settimeout(10)
            assert s.recv(4096) == b""
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "shutting down" in out
        assert "Traceback" not in out
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_broker_serving_tcp_alone_imports_no_console_websocket_or_other_command(tmp_path: Path) -> None:
    """With the console and the WebSocket listener off, ``serve`` opens its port without
    importing them (the page, Prometheus' client, the WebSocket library) or the modules of
    the other ``minibroker`` commands: what is not used is not paid for at start."""
    proc, _ = start_broker_process(tmp_path / "data", env={"PYTHONVERBOSE": "1"})  # names each module it loads
    try:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.startup_log + rest  # type: ignore[attr-defined]
    imported = set(re.findall(r"^import '([^']+)'", log, re.MULTILINE))
    assert {"minibroker.edge.server", "clients.commands.serve"} <= imported  # the record is the imports'
    unused = ("minibroker.edge.console", "minibroker.edge.websocket", "prometheus_client", "websockets")
    unused += ("importlib.metadata",)  # the loop's name in the log line needs no package metadata
    assert sorted(m for m in imported if m.startswith(unused)) == []
    assert sorted(m for m in imported if m.startswith("clients.commands.") and m != "clients.commands.serve") == []


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "clients.cli", "serve", "--port", str(port), "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_many_connections_at_once(broker) -> None:
    async def main() -> None:
        n = 200

        async def client(i: int) -> bytes:
            reader, writer = await asyncio.open_connection(*broker.address)
            writer.write(CONNECT)
            writer.write(encode(Frame("SUBSCRIBE", {"destination": f"/queue/many.{i}", "id": "s"})))
            writer.write(encode(Frame("SEND", {"destination": f"/queue/many.{i}"}, b"%d" % i)))
            parser = FrameParser(role="client", version="1.2")
            frames: list[Frame] = []
            while not any(f.command == "MESSAGE" for f in frames):
                frames += parser.feed(await asyncio.wait_for(reader.read(4096), 10))
            writer.close()
            return [f for f in frames if f.command == "MESSAGE"][0].body

        bodies = await asyncio.gather(*(client(i) for i in range(n)))
        assert bodies == [b"%d" % i for i in range(n)]

    asyncio.run(main())


def test_outbound_buffers_stay_bounded_for_a_client_that_does_not_read(broker_factory) -> None:
    rb = broker_factory(transport={"write_buffer_limit": 64 * 1024})
    body = b"x" * 8192
    with socket.create_connection(rb.address) as slow, socket.create_connection(rb.address) as producer:
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        slow.sendall(
            CONNECT + encode(Frame("SUBSCRIBE", {"destination": "/topic/firehose", "id": "s", "receipt": "r"}))
        )
        slow.settimeout(10)
        answered = b""
        while b"receipt-id:r" not in answered:  # subscribed before the first message
            answered += slow.recv(4096)
        producer.sendall(CONNECT)
        frame = encode(Frame("SEND", {"destination": "/topic/firehose"}, body))
        for _ in range(30):  # 24 MB: more than loopback's socket buffers can absorb
            producer.sendall(frame * 100)
        producer.sendall(encode(Frame("SEND", {"destination": "/queue/done", "receipt": "end"})))
        producer.settimeout(10)
        got = b""
        while b"receipt-id:end" not in got:
            got += producer.recv(65536)

        def outbound_bytes() -> int:
            server = rb.server
            total = 0
            for conn in server.connections.values():
                total += conn.transport.get_write_buffer_size()
            for session in server.broker.sessions.values():
                total += session.out_bytes
            return total

        queued = rb.call(outbound_bytes)
        # 3000 messages (24 MB) were published to a subscriber that reads nothing:
        # the sockets' buffers hold a little, the broker at most its limit plus a frame.
        assert queued <= 64 * 1024 + 2 * len(frame) + 4096
        held = rb.call(
            lambda: sum(len(s.pending) for s in rb.server.broker.destinations["/topic/firehose"].subscriptions)
        )
        assert held > 0  # the rest waits in the subscription, in order, for the slow reader


@patches_a_core_object
def test_a_bug_in_the_core_ends_only_that_connection_with_an_error(broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception from a handler (a bug) is logged; its client gets an ERROR with a message
    and is closed; another client keeps working."""
    from minibroker.core import Broker

    real = Broker._handle

    def faulty(self: Broker, session, frame: Frame) -> None:  # type: ignore[no-untyped-def]
        if frame.headers.get("boom") == "yes":
            raise RuntimeError("a bug")
        real(self, session, frame)

    monkeypatch.setattr(Broker, "_handle", faulty)

    async def main() -> None:
        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, FrameParser]:
            reader, writer = await asyncio.open_connection(*broker.address)
            writer.write(CONNECT)
            parser = FrameParser(role="client", version="1.2")
            frames = parser.feed(await asyncio.wait_for(reader.read(4096), 10))
            assert frames and frames[0].command == "CONNECTED"
            return reader, writer, parser

        async def frames_until_closed(reader: asyncio.StreamReader, parser: FrameParser) -> list[Frame]:
            frames: list[Frame] = []
            while data := await asyncio.wait_for(reader.read(4096), 10):
                frames += parser.feed(data)
            return frames

        bad_reader, bad_writer, bad_parser = await connect()
        good_reader, good_writer, good_parser = await connect()
        bad_writer.write(encode(Frame("SEND", {"destination": "/queue/bug", "boom": "yes"}, b"x")))
        frames = await frames_until_closed(bad_reader, bad_parser)
        assert [f.command for f in frames] == ["ERROR"]
        assert "internal error" in frames[0].headers["message"]
        good_writer.write(encode(Frame("SUBSCRIBE", {"destination": "/queue/fine", "id": "s"})))
        good_writer.write(encode(Frame("SEND", {"destination": "/queue/fine"}, b"ok")))
        got: list[Frame] = []
        while not any(f.command == "MESSAGE" for f in got):
            got += good_parser.feed(await asyncio.wait_for(good_reader.read(4096), 10))
        assert [f.body for f in got if f.command == "MESSAGE"] == [b"ok"]
        good_writer.close()

    asyncio.run(main())


def test_serve_freezes_the_start_up_heap_before_its_loop_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``minibroker serve`` takes the modules' objects out of the garbage collector's
    generations (``gc.freeze``) before the broker starts: full collections walk only
    what the broker makes."""
    import gc

    import clients.cli
    from clients.commands import serve as serve_command

    frozen: list[int] = []

    def run_loop(main: Any, loop: str) -> None:
        frozen.append(gc.get_freeze_count())
        main.close()  # the broker itself is not started

    monkeypatch.setattr(serve_command, "run_loop", run_loop)
    gc.unfreeze()
    try:
        assert clients.cli.main(["serve", "--port", "0", "--data-dir", str(tmp_path), "--log-level", "warning"]) == 0
    finally:
        gc.unfreeze()  # this test process's objects go back to the collector
    assert frozen and frozen[0] > 10_000
