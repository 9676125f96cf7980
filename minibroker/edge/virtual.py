"""A virtual network: the real broker core, virtual clients, a virtual clock.

Theory of operation
-------------------
Because the core is sans-IO, the whole broker can run without sockets. A
``VirtualNetwork`` owns a ``Broker`` on a ``ManualClock`` and plays the part of
the asyncio edge: it feeds each ``VirtualClient``'s bytes to the core and
carries the core's actions back (writes land in the client's inbound buffer,
closes mark it closed). Time moves only in ``advance()``, which runs the
broker's timers and the clients' scheduled actions in time order, so a run is
exact and repeatable and takes milliseconds however many virtual seconds it
covers.

A client's inbound buffer models the socket: with ``recv_buffer`` set, the
broker is told the connection is not writable once that many bytes wait
unread (the socket buffers are full), and writable again once the client has
read them down (``read()``). With ``auto_read`` (the default) the client
reads everything as soon as it arrives. The other direction too: with
``send_buffer`` set, what the client writes waits in a buffer of that size
while the broker is not reading it (flow control, a busy store), and a write
that does not fit is cut short (``write()`` returns what was taken, and
``send_raw`` raises ``PartialWrite``), as a real non-blocking socket does.

Tests use it to check the core frame by frame; the labs use it to reproduce
each pathology in seconds.
"""

from __future__ import annotations

import heapq
import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minibroker.config import BrokerConfig
from minibroker.connection.clock import ManualClock
from minibroker.core.actions import CheckLogin, Close, PauseReading, ResumeReading, Shutdown, Sync, Write
from minibroker.core.broker import Broker
from minibroker.core.invariants import TeardownChecker
from minibroker.durability.persistence import MessageStore
from minibroker.frames import Frame
from minibroker.protocol.codec import FrameParser, encode
from minibroker.trace import MemoryTrace

__all__ = ["VirtualNetwork", "VirtualClient", "PartialWrite"]


class PartialWrite(ConnectionError):
    """A write to a full send buffer took only part of the bytes."""

    def __init__(self, written: int, total: int) -> None:
        super().__init__(f"wrote {written} of {total} bytes: the socket's send buffer is full")
        self.written = written
        self.total = total


class VirtualClient:
    """A STOMP peer on the virtual network."""

    def __init__(
        self,
        net: VirtualNetwork,
        name: str,
        *,
        recv_buffer: int | None = None,
        auto_read: bool = True,
        send_buffer: int | None = None,
    ) -> None:
        self.net = net
        self.name = name
        self.sid = net.broker.open_session(name)
        self.parser = FrameParser(role="client", version="1.2")
        self.received: list[Frame] = []
        self.inbound = bytearray()
        self.recv_buffer = recv_buffer
        self.auto_read = auto_read
        self.send_buffer = send_buffer
        #: Bytes written by the client that the broker has not read yet.
        self.outbound = bytearray()
        self.closed = False
        self.close_reason = ""
        self.reading_paused = False
        self.version = "1.2"
        self._blocked = False

    @property
    def tag(self) -> str:
        """The broker's id for this connection, as CONNECTED and the trace give it."""
        return self.net.broker.session_tag(self.sid)

    # -- sending
    def send_frame(self, command: str, headers: dict[str, str] | None = None, body: bytes | str = b"") -> None:
        """Encode a frame and hand it to the broker."""
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send_raw(encode(Frame(command, headers or {}, body), self.version))

    def send_raw(self, data: bytes) -> None:
        """Write raw bytes; ``PartialWrite`` if the send buffer took only part."""
        written = self.write(data)
        if written < len(data):
            raise PartialWrite(written, len(data))

    def write(self, data: bytes) -> int:
        """Write what fits in the send buffer; the broker reads it when it reads."""
        if self.closed:
            raise ConnectionError(f"{self.name} is closed")
        if self.send_buffer is not None:
            data = data[: max(0, self.send_buffer - len(self.outbound))]
        self.outbound += data
        self.flush_outbound()
        return len(data)

    def flush_outbound(self) -> None:
        """Let the broker read what is waiting, unless it is not reading this socket."""
        if self.outbound and not self.reading_paused and not self.closed:
            data = bytes(self.outbound)
            self.outbound.clear()
            self.net.broker.receive_data(self.sid, data)
            self.net.pump()

    def connect(self, version: str = "1.2", **headers: str) -> Frame:
        """CONNECT and return the CONNECTED frame (or the ERROR)."""
        hdrs = {"accept-version": version, "host": "localhost"}
        hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
        self.send_frame("CONNECT", hdrs)
        reply = self.last()
        if reply is not None and reply.command == "CONNECTED":
            self.version = reply.headers["version"]
            self.parser.version = self.version
        return reply  # type: ignore[return-value]

    def subscribe(self, destination: str, sub_id: str = "0", ack: str = "auto", **headers: str) -> None:
        hdrs = {"destination": destination, "id": sub_id, "ack": ack}
        hdrs.update(headers)
        self.send_frame("SUBSCRIBE", hdrs)

    def send(self, destination: str, body: bytes | str = b"", **headers: str) -> None:
        hdrs = {"destination": destination}
        hdrs.update(headers)
        self.send_frame("SEND", hdrs, body)

    def ack(self, message: Frame, command: str = "ACK", **headers: str) -> None:
        """ACK (or NACK) ``message`` the way this client's version requires."""
        if self.version == "1.2":
            hdrs = {"id": message.headers["ack"]}
        elif self.version == "1.1":
            hdrs = {"message-id": message.headers["message-id"], "subscription": message.headers["subscription"]}
        else:
            hdrs = {"message-id": message.headers["message-id"]}
        hdrs.update(headers)
        self.send_frame(command, hdrs)

    def nack(self, message: Frame, **headers: str) -> None:
        self.ack(message, "NACK", **headers)

    def disconnect(self, receipt: str | None = None) -> None:
        self.send_frame("DISCONNECT", {"receipt": receipt} if receipt else {})

    def drop(self) -> None:
        """The socket dies without a DISCONNECT."""
        if not self.closed:
            self.closed = True
            self.close_reason = "dropped by client"
            self.net.broker.connection_lost(self.sid)
            self.net.pump()

    # -- receiving
    def _arrive(self, data: bytes) -> None:
        self.inbound += data
        self.net.broker.report_buffered(self.sid, len(self.inbound))
        if self.auto_read:
            self.read()
        elif self.recv_buffer is not None and len(self.inbound) >= self.recv_buffer and not self._blocked:
            self._blocked = True
            self.net.broker.set_writable(self.sid, False)

    def read(self, max_bytes: int | None = None) -> list[Frame]:
        """Read (up to ``max_bytes`` of) what the broker sent; returns the frames completed."""
        n = len(self.inbound) if max_bytes is None else min(max_bytes, len(self.inbound))
        data = bytes(self.inbound[:n])
        del self.inbound[:n]
        self.net.broker.report_buffered(self.sid, len(self.inbound))
        frames = self.parser.feed(data) if data else []
        self.received.extend(frames)
        if self._blocked and (self.recv_buffer is None or len(self.inbound) < self.recv_buffer // 2):
            self._blocked = False
            self.net.broker.set_writable(self.sid, True)
            self.net.pump()
        return frames

    def frames(self, command: str | None = None) -> list[Frame]:
        """Frames received so far (of ``command`` only, if given)."""
        return [f for f in self.received if command is None or f.command == command]

    def messages(self) -> list[Frame]:
        return self.frames("MESSAGE")

    def bodies(self) -> list[bytes]:
        return [f.body for f in self.messages()]

    def last(self) -> Frame | None:
        return self.received[-1] if self.received else None

    def clear(self) -> None:
        self.received.clear()

    def __repr__(self) -> str:
        return f"<VirtualClient {self.name} sid={self.sid}{' closed' if self.closed else ''}>"


class VirtualNetwork:
    """The broker core plus virtual clients on one virtual clock."""

    #: Check every connection's end, strictly, in networks that do not say otherwise
    #: (the test suite turns it on for all its core tests: ``tests/conftest.py``).
    strict_teardown_checks = False

    def __init__(
        self,
        config: BrokerConfig | None = None,
        *,
        seed: int = 0,
        trace: Any = None,
        data_dir: Any = None,
        check_teardown: bool | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.config = config or BrokerConfig()
        self.seed = seed
        #: ``trace=True`` records the broker's trace in memory (``net.trace.events()``).
        self.trace = MemoryTrace(self.clock.now, broker=self.config.broker.name) if trace is True else trace
        #: With a data directory, persistent messages go to real journals there.
        self.data_dir = data_dir
        #: With ``check_teardown``, every connection's end is checked (``invariants.py``):
        #: ``net.teardown.violations`` lists what a close left behind, across restarts.
        #: Left unsaid, ``strict_teardown_checks`` decides: a strict checker raises at the bad close.
        if check_teardown is None and VirtualNetwork.strict_teardown_checks:
            self.teardown: TeardownChecker | None = TeardownChecker(strict=True)
        else:
            self.teardown = TeardownChecker() if check_teardown else None
        #: The ``Shutdown`` the broker asked for (its store failed), or None.
        self.shutdown: Shutdown | None = None
        #: Where the broker's temp store goes, as the server chooses it: the data
        #: directory's ``tmp_storage``; without a data directory, a directory of
        #: the system's, removed with the network.
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is not None:
            self.temp_dir = Path(data_dir) / "tmp_storage"
        else:
            self._scratch = tempfile.TemporaryDirectory(prefix="minibroker-sim-")
            self.temp_dir = Path(self._scratch.name) / "tmp_storage"
        self.broker = self._start_broker()
        self.clients: dict[int, VirtualClient] = {}
        self._agenda: list[tuple[float, int, Callable[[], Any]]] = []
        self._order = itertools.count()

    def _start_broker(self) -> Broker:
        store = None
        if self.data_dir is not None and self.config.broker.persistent:
            store = MessageStore(self.config.store, self.data_dir)
        broker = Broker(self.config, self.clock, seed=self.seed, trace=self.trace, store=store, temp_dir=self.temp_dir)
        broker.recover()
        broker.close_observer = self.teardown
        return broker

    def restart(self, config: BrokerConfig | None = None, *, while_down: Callable[[], Any] | None = None) -> None:
        """Stop the broker (every client is disconnected) and start it again
        on the same data directory, as after a process restart.

        ``while_down`` runs between the two, with the journals closed and the
        data directory unlocked: where an offline tool (``minibroker journal
        compact``) goes.
        """
        for c in list(self.clients.values()):
            c.closed = True
            c.close_reason = "broker restarted"
        self.clients.clear()
        self.broker.close()
        if while_down is not None:
            while_down()
        self.seed += 1
        if config is not None:
            self.config = config
        self.broker = self._start_broker()

    def stop(self) -> None:
        """The broker stops: every connection is closed (traced as a shutdown), the journals closed."""
        if self.broker.store is not None and self.broker.store.closed:
            return  # already stopped (or crashed and not restarted)
        self.broker.shutdown()
        self.pump()
        self.broker.close()

    def crash(self) -> None:
        """The broker process dies: nothing is flushed or synced (restart() after)."""
        for c in list(self.clients.values()):
            c.closed = True
        self.clients.clear()

    def client(self, name: str = "", **options: Any) -> VirtualClient:
        """A new connection (not yet CONNECTed)."""
        c = VirtualClient(self, name or f"client{len(self.clients) + 1}", **options)
        self.clients[c.sid] = c
        self.pump()
        return c

    def connected_client(self, name: str = "", version: str = "1.2", **options: Any) -> VirtualClient:
        c = self.client(name, **options)
        reply = c.connect(version)
        if reply is None or reply.command != "CONNECTED":
            raise AssertionError(f"CONNECT refused: {reply}")
        return c

    def pump(self) -> None:
        """Carry out the broker's actions until it has none."""
        broker = self.broker
        while True:
            actions = broker.take_actions()
            if not actions:
                return
            resumed: list[VirtualClient] = []
            # The events carrying them out feeds (a close's connection_lost ...) settle
            # together at the turn's end, as they did when the next drain did that work.
            with broker.turn():
                for action in actions:
                    if type(action) is Sync:
                        self._sync()
                        continue
                    if type(action) is Shutdown:
                        self.shutdown = action
                        continue
                    c = self.clients.get(action.session)
                    if c is None or c.closed:
                        continue
                    if type(action) is Write:
                        c._arrive(action.data)
                    elif type(action) is Close:
                        c.closed = True
                        c.close_reason = action.reason
                        broker.connection_lost(c.sid)
                    elif type(action) is PauseReading:
                        c.reading_paused = True
                    elif type(action) is ResumeReading:
                        c.reading_paused = False
                        resumed.append(c)
                    elif type(action) is CheckLogin:
                        broker.login_checked(action.session, action.check())  # the hash takes no virtual time
            # As the asyncio edge: a resume and a pause in one batch read nothing.
            for c in resumed:
                c.flush_outbound()

    def _sync(self) -> None:
        """Carry out a ``Sync``: an instant fsync on the virtual clock."""
        store = self.broker.store
        assert store is not None
        try:
            generation = store.sync()
        except Exception as exc:  # noqa: BLE001 - as the asyncio edge: whatever stopped the fsync is a failure
            self.broker.store_failed(exc)
        else:
            self.broker.store_synced(generation)

    # -- time
    @property
    def now(self) -> float:
        return self.clock.now()

    def at(self, when: float, fn: Callable[[], Any]) -> None:
        """Run ``fn`` (a client action) at virtual time ``when``."""
        heapq.heappush(self._agenda, (when, next(self._order), fn))

    def every(
        self, period: float, fn: Callable[[], Any], *, start: float | None = None, until: float | None = None
    ) -> None:
        """Run ``fn`` every ``period`` seconds from ``start`` (default: now + period)."""
        first = self.now + period if start is None else start

        def run(t: float) -> None:
            if until is not None and t > until:
                return
            fn()
            self.at(t + period, lambda: run(t + period))

        self.at(first, lambda: run(first))

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running timers and agenda in order."""
        target = self.now + seconds
        while True:
            deadline = self.broker.next_deadline()
            agenda = self._agenda[0][0] if self._agenda else None
            nxt = min((t for t in (deadline, agenda) if t is not None), default=None)
            if nxt is None or nxt > target:
                break
            self.clock.set(max(nxt, self.now))
            if agenda is not None and agenda <= self.now:
                _, _, fn = heapq.heappop(self._agenda)
                fn()
            self.broker.tick()
            self.pump()
        self.clock.set(target)
        self.broker.tick()
        self.pump()
