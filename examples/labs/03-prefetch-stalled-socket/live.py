"""Lab 03 against the real server on real sockets (``minibroker lab run 03 --live``).

The same runs as ``scenario.py``, played with our asyncio client
(``clients.stomp``) against ``lab.live_broker()`` on loopback, in a few
seconds each. What differs from the virtual run, and why:

- Loopback's kernel buffers are large and grow by themselves: the broker's
  send queue takes megabytes, so the messages are 16 KB (a few hundred in
  flight fill the consumer's side), and the broker's receive queue takes some
  180 KB of 40-byte ACKs before the consumer's writes would stall. A
  consumer holds at most one prefetch of messages to acknowledge (40 KB of
  ACKs for 1000), so the kernel never cuts an ACK short here and the exact
  partial write cannot be forced. Instead the lab watches the broker's own
  statistics (what ``minibroker stat --connections`` shows) and, once they
  show the stall (the broker has not read the connection for a second
  although the consumer has written ACKs since), makes the consumer do what
  the article's did after its failed write: leave the socket as it is and
  reconnect with the same client-id.
- The kernel's queues on both ends are read from ``/proc/net/tcp`` (the
  article's "TCP send and receive queues ... very large, on both machines").
- The broker writes its trace to the run's directory; ACK latency is the time
  from the consumer's write to the broker's ``ack`` event (both wall clock).
- The heart-beats run: the broker can only count a connection's silence once
  it has read everything the peer sent (ActiveMQ's inactivity monitor skips
  its check while a command is being handled, and so does minibroker), and
  each ACK here costs the store seconds. A consumer that had a hundred ACKs
  queued in the kernel when it left would keep its connection "alive" for
  minutes, longer the busier the machine. So in this run the consumer writes
  its next ACK only once the broker's end of the socket has taken the last
  one (its kernel receive queue is empty, ``FIONREAD``): what a consumer with
  the article's small buffers does, its write waiting. It leaves with at most
  two ACKs in the broker's hands, and keeps retrying for as long as the
  broker needs to handle them plus the heart-beat grace, computed from the
  broker's own figures at the stall, plus ``GIVE_UP_AFTER``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import struct
import termios
import time
from pathlib import Path
from typing import Any

from clients.commands.stat import fetch_statistics
from clients.labs import LabRun, Outcome
from clients.stomp import StompClient, StompClientError, StompError
from clients.stomp.subscription import Subscription

QUEUE = "/queue/jobs"
CLIENT_ID = "perl-consumer"
MESSAGES = 400
BODY = "x" * 16_000
WORK = 0.01
#: The consumer's SO_RCVBUF and SO_SNDBUF (the kernel doubles them).
SOCKET_BUFFER = 4096
#: The stall: the broker has not read the connection for this long although
#: the consumer has written ACKs since.
STALL_SECONDS = 1.0
#: How long a run may wait for the stall, or for the workload to finish.
RUN_SECONDS = 10.0
#: The heart-beats run's stall: the consumer's next ACK has waited this long for the broker
#: to read the last one (each ACK costs the store more than this here).
GATE_SECONDS = 0.5
RETRY_DELAY = 1.0
GIVE_UP_AFTER = 5.0
HEART_BEAT_MS = 2000
POLL = 0.25


def run_live(lab: LabRun) -> Outcome:
    trace_file = lab.workdir / "trace.jsonl"
    config = lab.config.replace(broker={"trace": str(trace_file)})
    with lab.live_broker(config) as live:
        if lab.name in ("exclusive", "shared"):
            result = asyncio.run(_exclusive(lab, live.port, exclusive=lab.name == "exclusive"))
        else:
            result = asyncio.run(_Story(lab, live.port, live).play())
    if isinstance(result, _Story):
        return result.outcome(_read_trace(trace_file))
    return result


def run_exclusive_on(lab: LabRun, port: int) -> Outcome:
    """The appendix (``exclusive``, ``shared``) against any broker on ``port``: what the clients see."""
    return asyncio.run(_exclusive(lab, port, exclusive=lab.name == "exclusive"))


def _read_trace(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _broker_socket(live: Any, peer_port: int) -> int | None:
    """The file descriptor of the broker's end of the connection from ``peer_port``."""

    def find() -> int | None:
        for conn in live.server.connections.values():
            transport = conn.transport
            peer = transport.get_extra_info("peername") if transport is not None else None
            if peer is not None and peer[1] == peer_port:
                return int(transport.get_extra_info("socket").fileno())
        return None

    return live.call(find)  # type: ignore[no-any-return]


def _unread(fd: int) -> int:
    """Bytes waiting in a socket's kernel receive queue (``FIONREAD``)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:  # the broker closed it
        return 0


def _tcp_queues(port_a: int, port_b: int) -> dict[int, tuple[int, int]] | None:
    """Send-Q and Recv-Q of both ends of the loopback connection port_a <-> port_b, by local port."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    queues = {}
    for line in lines:
        f = line.split()
        local, remote = int(f[1].split(":")[1], 16), int(f[2].split(":")[1], 16)
        if {local, remote} == {port_a, port_b}:
            tx, rx = (int(x, 16) for x in f[4].split(":"))
            queues[local] = (tx, rx)
    return queues


class _Story:
    """One run of the story, live."""

    def __init__(self, lab: LabRun, port: int, live: Any) -> None:
        self.lab = lab
        self.port = port
        self.live = live
        self.prefetch = 1 if lab.name == "prefetch-1" else None
        self.heart_beat = lab.name == "heart-beats"
        self.version = "1.1" if self.heart_beat else "1.0"
        self.clients: list[StompClient] = []
        self.ack_written: dict[tuple[str, str], float] = {}
        self.processed: set[str] = set()
        self.attempts: list[tuple[float, bool, str]] = []
        self.stall: dict[str, Any] | None = None
        self.queues: dict[int, tuple[int, int]] | None = None
        self.old: StompClient | None = None
        self.old_port = 0
        #: After the reconnect: the broker's view of the old connection (None: gone)
        #: and the kernel's queues of its socket (None: the socket is closed).
        self.after: dict[str, Any] | None = None
        self.after_queues: dict[int, tuple[int, int]] | None = None
        self.finished_at: float | None = None
        self.gave_up_at: float | None = None
        self.t0 = 0.0
        #: Heart-beats run: the broker's end of the consumer's socket (the ACK gate).
        self.broker_fd: int | None = None
        #: How long the consumer retries; heart-beats run: from the broker's figures at the stall.
        self.patience = GIVE_UP_AFTER
        #: Heart-beats run: the ACKs left with the broker at the stall, when it should drop the
        #: silent connection (seconds after the stall), and when it did.
        self.held_acks = 0
        self.expected_drop: float | None = None
        self.stall_at = 0.0
        #: Heart-beats run: since when the consumer's next ACK has waited for the broker to read the last.
        self.gate_since: float | None = None

    # -- the consumer
    async def _connect(self) -> tuple[StompClient, Subscription]:
        extra = {"heart-beat": f"{HEART_BEAT_MS},0"} if self.heart_beat else None
        client = await StompClient.connect(
            "127.0.0.1",
            self.port,
            versions=(self.version,),
            client_id=CLIENT_ID,
            sndbuf=SOCKET_BUFFER,
            rcvbuf=SOCKET_BUFFER,
            max_buffered=1,
            extra_headers=extra,
        )
        self.clients.append(client)
        sub = await client.subscribe(
            QUEUE, ack="client", prefetch=self.prefetch, headers={"activemq.exclusive": "true"}
        )
        return client, sub

    async def _work(self, client: StompClient, sub: Subscription) -> None:
        """Take a message, work on it, ACK it (no receipt, as Net::Stomp), until stopped."""
        session = str(client.session).rsplit("-", 1)[-1]
        while len(self.processed) < MESSAGES:
            try:
                m = await sub.get(timeout=RUN_SECONDS)
            except (TimeoutError, StompClientError):
                return
            self.processed.add(m.message_id)
            await asyncio.sleep(WORK)
            if self.broker_fd is not None and client is self.old:
                self.gate_since = time.monotonic()
                while _unread(self.broker_fd):  # the last ACK is not read yet: this write waits
                    await asyncio.sleep(WORK / 2)
                self.gate_since = None
            await client.ack(m)
            self.ack_written[(session, m.message_id)] = time.time()
        self.finished_at = time.monotonic() - self.t0

    def _now(self) -> float:
        return time.monotonic() - self.t0

    async def play(self) -> _Story:
        producer = await StompClient.connect("127.0.0.1", self.port)
        monitor = await StompClient.connect("127.0.0.1", self.port)
        self.clients += [producer, monitor]
        for i in range(MESSAGES):
            await producer.send(QUEUE, BODY, headers={"persistent": "true"}, receipt=i == MESSAGES - 1)
        client, sub = await self._connect()
        self.old, self.old_port = client, client.get_extra_info("sockname")[1]
        if self.heart_beat:
            self.broker_fd = _broker_socket(self.live, self.old_port)
        self.t0 = time.monotonic()
        worker = asyncio.create_task(self._work(client, sub))
        try:
            while not worker.done() and self._now() < RUN_SECONDS:
                await asyncio.sleep(POLL)
                stats = await self._connection(monitor)
                if stats is not None and self._stalled(stats):
                    self.stall = stats
                    self.stall_at = time.time()
                    self.queues = _tcp_queues(self.port, self.old_port)
                    if self.heart_beat:
                        self._expect_the_drop(stats)
                    break
            if self.stall is None:
                await asyncio.wait_for(worker, RUN_SECONDS)
                return self
            worker.cancel()  # the article's client stopped here: its ACK write had failed
            await self._reconnect()
            await asyncio.sleep(POLL)
            self.after = await self._connection(monitor)
            self.after_queues = _tcp_queues(self.port, self.old_port)
        finally:
            for c in self.clients:
                c.close()
        return self

    async def _connection(self, monitor: StompClient) -> dict[str, Any] | None:
        """The broker's statistics for the consumer's (first) connection."""
        stats = await fetch_statistics(monitor, QUEUE.rsplit("/", 1)[-1], connections=True)
        for conn in stats["connections"]:
            if conn["remoteAddress"].endswith(f":{self.old_port}"):
                return conn
        return None

    def _expect_the_drop(self, conn: dict[str, Any]) -> None:
        """When the broker should drop the connection the consumer is leaving, from its own
        figures: every ACK it holds costs the store latency x the messages in flight, then
        the heart-beat grace; the consumer retries that long and ``GIVE_UP_AFTER`` more."""
        last_read = time.time() - conn["secondsSinceLastRead"]
        self.held_acks = 1 + sum(t > last_read for t in self.ack_written.values())  # + the one being handled
        latency = self.lab.config.store.store_latency / 1000
        in_flight = conn["unacknowledged"] + 1
        store = sum(latency * (in_flight - i) for i in range(self.held_acks))
        grace = HEART_BEAT_MS / 1000 * self.lab.config.transport.hb_grace_period_multiplier
        self.expected_drop = store + grace
        self.patience = GIVE_UP_AFTER + self.expected_drop

    def _stalled(self, conn: dict[str, Any]) -> bool:
        """Not read for STALL_SECONDS although the consumer has written ACKs since."""
        if self.broker_fd is not None:  # heart-beats: an ACK write has waited GATE_SECONDS for the broker to read
            return (
                conn["readingPaused"]
                and self.gate_since is not None
                and time.monotonic() - self.gate_since >= GATE_SECONDS
            )
        since = conn["secondsSinceLastRead"]
        if not conn["readingPaused"] or since < STALL_SECONDS:
            return False
        last_read = time.time() - since
        return any(t > last_read for t in self.ack_written.values())

    async def _reconnect(self) -> None:
        """Connect again with the same client-id; retry refusals every RETRY_DELAY s."""
        first = self._now()
        while True:
            try:
                client, sub = await self._connect()
            except StompError as exc:
                self.attempts.append((self._now(), False, exc.frame.headers.get("message", str(exc))))
                if self._now() - first >= self.patience:
                    self.gave_up_at = self._now()
                    return
                await asyncio.sleep(RETRY_DELAY)
                continue
            self.attempts.append((self._now(), True, ""))
            return

    def _dropped_after(self, trace: list[dict[str, Any]]) -> float | None:
        """Seconds from the stall to the broker's heart-beat timeout of the old connection, or None."""
        old = self.old.session if self.old is not None else None
        sessions = {old, old.rsplit("-", 1)[-1]} if old else set()
        return next(
            (
                round(e["ts"] - self.stall_at, 1)
                for e in trace
                if e["event"] == "error"
                and "heart-beat timeout" in e.get("message", "")
                and e.get("session") in sessions
            ),
            None,
        )

    def _heart_beat_timing(self, dropped: float | None) -> str:
        """The heart-beats run: when the broker should have dropped the silent connection, and when it did."""
        assert self.expected_drop is not None
        seen = (
            f"it did after {dropped:.1f} s"
            if dropped is not None
            else "it had not when the consumer gave up (a store or a loop slower than its own figures)"
        )
        return (
            f"heart-beats: the consumer wrote each ACK only once the broker had read the last, so it left "
            f"{self.held_acks} ACK(s) with the broker; handling them and {HEART_BEAT_MS} ms x "
            f"{self.lab.config.transport.hb_grace_period_multiplier:g} of silence, the broker should drop the "
            f"connection about {self.expected_drop:.1f} s after the stall, and {seen}; the consumer retried for up "
            f"to {self.patience:.1f} s"
        )

    # -- the verdict
    def outcome(self, trace: list[dict[str, Any]]) -> Outcome:
        lab = self.lab
        hb = f", heart-beat {HEART_BEAT_MS},0" if self.heart_beat else ""
        lab.note(
            f"live: {MESSAGES} persistent messages of {len(BODY) // 1000} KB on {QUEUE}, store_latency "
            f"{lab.config.store.store_latency} ms; the consumer: STOMP {self.version}{hb}, ack:client, client-id "
            f"{CLIENT_ID}, prefetch {self.prefetch or 'default'}, SO_RCVBUF/SO_SNDBUF {SOCKET_BUFFER} B, "
            f"{WORK * 1000:.0f} ms per message"
        )
        latency = lab.config.store.store_latency
        waits = [
            e["ts"] - self.ack_written[(e["session"], e["msg"])]
            for e in trace
            if e["event"] == "ack" and (e["session"], e["msg"]) in self.ack_written
        ]
        in_flight = max(
            (e["pending"] for e in trace if e["event"] == "connection" and e.get("client_id") == CLIENT_ID), default=0
        )
        if self.stall is not None:
            s = self.stall
            lab.note(
                f"the stall, from the broker's statistics: {s['unacknowledged']} unacked, "
                f"{s['outboundQueuedBytes']:,} B queued in the broker for the socket, readingPaused "
                f"{s['readingPaused']}, not read for {s['secondsSinceLastRead']:.1f} s while the consumer wrote ACKs; "
                f"each ACK costs the store {latency} ms x {s['unacknowledged'] + 1} = "
                f"{latency * (s['unacknowledged'] + 1) / 1000:.2f} s"
            )
        if self.queues:
            broker_end = next((q for p, q in self.queues.items() if p == self.port), None)
            consumer_end = self.queues.get(self.old_port)
            if broker_end and consumer_end:
                lab.note(
                    f"kernel queues (/proc/net/tcp): broker end Send-Q {broker_end[0]:,} B, Recv-Q {broker_end[1]:,} B "
                    f"(ACKs it has not read); consumer end Recv-Q {consumer_end[1]:,} B, Send-Q {consumer_end[0]:,} B"
                )
        if self.stall is not None and not self.heart_beat:
            lab.note(
                "the kernel took every ACK (the broker's receive queue holds some 180 KB of them before a write "
                "would stall), so there is no partial write live: the consumer leaves the socket here, as the "
                "article's did after its failed write, and reconnects with the same client-id"
            )
        if waits:
            lab.note(
                f"ACK latency, written -> handled by the broker: median {sorted(waits)[len(waits) // 2]:.3f} s, "
                f"max {max(waits):.3f} s ({len(waits)} of {len(self.ack_written)} ACKs handled)"
            )
        refused = [a for a in self.attempts if not a[1]]
        accepted = [a for a in self.attempts if a[1]]
        if refused:
            lab.note(
                f"t={refused[0][0]:.1f}s: reconnect refused: ERROR '{refused[0][2]}'"
                + (f"; {len(refused) - 1} more, every {RETRY_DELAY:g} s" if len(refused) > 1 else "")
            )
        if accepted:
            lab.note(f"t={accepted[0][0]:.1f}s: reconnect accepted")
        if self.stall is not None and self.after is not None:
            lab.note(
                f"the old connection is still held by the broker: {self.after['unacknowledged']} unacked, "
                f"not read for {self.after['secondsSinceLastRead']:.1f} s, no write for "
                f"{self.after['secondsSinceLastWrite']:.1f} s"
            )
        elif self.stall is not None:
            ends = [
                e
                for e in trace
                if e["event"] in ("write_timeout", "error")
                and e.get("session") is not None
                and "already connected" not in e.get("message", "")
            ]
            why = (
                f"write timeout after {ends[0]['waited']:.1f} s"
                if ends and ends[0]["event"] == "write_timeout"
                else f"ERROR '{ends[0]['message']}'"
                if ends
                else "closed"
            )
            lingering = ""
            if self.after_queues and self.port in self.after_queues:
                lingering = (
                    f"; its socket is still open, {self.after_queues[self.port][0]:,} B unsent "
                    f"(closed, not aborted: it waits for a reader that will not come)"
                )
            lab.note(f"the broker ended the old connection: {why}{lingering}")
        dropped = self._dropped_after(trace)
        if self.expected_drop is not None:
            lab.note(self._heart_beat_timing(dropped))
        lab.note(f"processed {len(self.processed)} of {MESSAGES} messages")
        metrics = {
            "in_flight": in_flight,
            "ack_wait_max_s": round(max(waits), 3) if waits else 0.0,
            "stalled": self.stall is not None,
            "connects_refused": len(refused),
            "connects_accepted": len(accepted) + 1,
            "processed": len(self.processed),
            "messages": MESSAGES,
        }
        if self.heart_beat:
            metrics.update(
                held_acks=self.held_acks,
                expected_drop_s=round(self.expected_drop or 0.0, 1),
                dropped_after_s=dropped,
            )
        if self.gave_up_at is not None:
            return Outcome(
                True,
                f"every reconnect was refused while the broker held the stalled connection; "
                f"the consumer gave up at t={self.gave_up_at:.1f}s",
                metrics=metrics,
            )
        if lab.name.startswith("prefetch-1"):
            if self.stall is None and self.finished_at is not None:
                return Outcome(
                    False, f"the workload ran to the end at t={self.finished_at:.1f}s: no stall", metrics=metrics
                )
            return Outcome(True, "the consumer stalled even with prefetch 1", metrics=metrics)
        if accepted:
            return Outcome(
                False,
                f"the reconnect got in at t={accepted[0][0]:.1f}s "
                f"({'the old connection taken over' if not refused else 'after the broker dropped the old one'})",
                metrics=metrics,
            )
        return Outcome(True, "the consumer never stalled, so the cure was not tested", metrics=metrics)


async def _exclusive(lab: LabRun, port: int, *, exclusive: bool) -> Outcome:
    """The appendix, live: two consumers, prefetch 1, with and without activemq.exclusive."""
    queue = "/queue/shared-work"
    headers = {"activemq.exclusive": "true"} if exclusive else {}
    producer = await StompClient.connect("127.0.0.1", port)
    consumers = {name: await StompClient.connect("127.0.0.1", port) for name in ("A", "B")}
    subs = {
        name: await c.subscribe(queue, ack="client-individual", prefetch=1, headers=headers)
        for name, c in consumers.items()
    }
    got = dict.fromkeys(consumers, 0)

    async def work(name: str) -> None:
        while True:
            try:
                m = await subs[name].get(timeout=1.0)
            except (TimeoutError, StompClientError):
                return
            await asyncio.sleep(WORK)
            await consumers[name].ack(m)
            got[name] += 1

    total = 100
    for i in range(total):
        await producer.send(queue, "job", receipt=i == total - 1)
    await asyncio.gather(work("A"), work("B"))
    phase1 = dict(got)
    await consumers["A"].disconnect()
    for i in range(50):
        await producer.send(queue, "job", receipt=i == 49)
    await work("B")
    for c in (producer, consumers["B"]):
        await c.disconnect()
    lab.note(
        f"live: two consumers on {queue}, {'activemq.exclusive:true' if exclusive else 'no activemq.exclusive'}, "
        f"prefetch 1, {WORK * 1000:.0f} ms per message each"
    )
    lab.note(f"{total} messages with both: " + ", ".join(f"{n} got {phase1[n]}" for n in phase1))
    lab.note(f"then A disconnects and 50 more arrive: B got {got['B'] - phase1['B']}")
    idle = min(phase1.values()) == 0
    return Outcome(
        idle,
        "no load balancing: one consumer got everything"
        if idle
        else f"the two consumers shared the queue ({phase1['A']} / {phase1['B']})",
        metrics={"a_share": phase1["A"], "b_share": phase1["B"], "b_after_a_left": got["B"] - phase1["B"]},
    )
