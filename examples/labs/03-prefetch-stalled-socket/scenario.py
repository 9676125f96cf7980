"""The stalled-socket trap: a slow consumer, the default prefetch, a slow store, a stalled socket.

``run(lab)`` plays the article's workload on the virtual clock, chosen by the
run's name. 1000 persistent messages of 1 KB wait on ``/queue/jobs``; one
consumer, modelled on the article's Perl client (``PerlConsumer``), reads them
one at a time through a small receive buffer, works 20 ms on each and ACKs
it. The broker's store is slow (``store_latency``): an ACK costs 5 ms for
every message still in flight, and the broker reads nothing more from that
connection meanwhile.

- ``default-prefetch``: the broker pushes about a hundred messages into the
  socket, every ACK costs more than half a second, the consumer's ACKs pile up
  in its 1 KB send buffer until one is written only in part. The consumer
  takes the socket for broken, leaves it and reconnects with the same
  client-id, every 2 s for 60 s: the broker, which still holds the old
  connection, refuses each time. Pathology: the consumer gives up.
- ``prefetch-1`` / ``prefetch-1-policy``: one message in flight (asked by the
  consumer, or the broker's policy); the workload runs to the end.
- ``link-stealing``, ``write-timeout``, ``heart-beats``: the broker ends the
  old connection (the reconnect takes it over; its writes have been stuck too
  long; it fell silent) and the consumer gets back in; the stall itself
  comes back each time.
- ``exclusive`` / ``shared``: the appendix on ``activemq.exclusive``, which
  the article's client library set by default: two consumers on one queue and
  the share of the messages each gets.

``run_live(lab)`` plays the same runs against the real server on real
sockets with our asyncio client (``live.py``); ``run_activemq(lab, broker)``
plays the appendix against ActiveMQ (``lab run 03 --against activemq``).
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

from clients.labs import LabRun, Outcome, sibling_module
from minibroker.edge import PartialWrite, VirtualClient, VirtualNetwork
from minibroker.frames import Frame

QUEUE = "/queue/jobs"
CLIENT_ID = "perl-consumer"

MESSAGES = 1000
BODY = "x" * 1000
#: Seconds the consumer works on one message.
WORK = 0.02
#: The consumer's socket buffers: what the broker can write before it must
#: wait for the consumer to read, and what the consumer can write while the
#: broker is not reading.
RECV_BUFFER = 8 * 1024
SEND_BUFFER = 1024
#: The consumer reads its socket this many bytes at a time.
READ_CHUNK = 512
#: A refused reconnect is tried again every RETRY_DELAY s, for GIVE_UP_AFTER s.
RETRY_DELAY = 2.0
GIVE_UP_AFTER = 60.0
RUN_SECONDS = 70.0
#: Heart-beats (heart-beats run): the consumer promises one every HEART_BEAT_MS.
HEART_BEAT_MS = 2000


def run_live(lab: LabRun) -> Outcome:
    """The same runs against the real server on real sockets: ``live.py``."""
    return sibling_module(__file__, "live").run_live(lab)


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The appendix against ActiveMQ (``lab run 03 --against activemq``): the live run's clients
    on ActiveMQ's port. The stalled-socket runs need the slow store, which ActiveMQ has no
    setting for (``activemq_not_run`` in lab.toml)."""
    return sibling_module(__file__, "live").run_exclusive_on(lab, broker.port)


def run_rabbitmq(lab: LabRun, broker: Any) -> Outcome:
    """The appendix against RabbitMQ (``lab run 03 --against rabbitmq``): the same clients on
    its STOMP port. It has no slow store either (``rabbitmq_not_run`` in lab.toml)."""
    return sibling_module(__file__, "live").run_exclusive_on(lab, broker.port)


def run(lab: LabRun) -> Outcome:
    if lab.name in ("exclusive", "shared"):
        return exclusive_appendix(lab, exclusive=lab.name == "exclusive")
    return stalled_socket(lab)


# ---------------------------------------------------------------- the consumer
class PerlConsumer:
    """The article's consumer, after Net::Stomp as its library configured it.

    STOMP 1.0 (Net::Stomp's; 1.1 when it must send heart-beats), ``ack:client``,
    a ``client-id``, ``activemq.exclusive:true`` and no prefetch header (the
    broker's default, 1000 for a queue). Every ``WORK`` seconds ``tick()`` ACKs
    the message in hand and reads the next one, ``READ_CHUNK`` bytes at a time.

    A write the send buffer takes only in part is an error, as the article's
    ``wrote 4 characters out of the 94 character frame``: the consumer takes
    the socket for broken and reconnects at once with the same client-id. It
    leaves the old socket as it is (the article saw full TCP queues on both
    machines: the old connection was still there). A refused CONNECT is tried
    again every ``RETRY_DELAY`` s; after ``GIVE_UP_AFTER`` s of refusals it
    stops for good (the article's client stopped at the first).
    """

    def __init__(self, net: VirtualNetwork, *, prefetch: int | None = None, heart_beat_ms: int = 0) -> None:
        self.net = net
        self.prefetch = prefetch
        self.heart_beat_ms = heart_beat_ms
        self.version = "1.1" if heart_beat_ms else "1.0"
        self.client: VirtualClient | None = None
        #: Connections the consumer left behind, still open on its side.
        self.abandoned: list[VirtualClient] = []
        #: (time, accepted, the ERROR's message) per CONNECT.
        self.attempts: list[tuple[float, bool, str]] = []
        #: (time, bytes written, frame size, command) per failed write.
        self.partial_writes: list[tuple[float, int, int, str]] = []
        #: Broker-side (session id, message id) -> when the consumer wrote its ACK.
        self.ack_written: dict[tuple[str, str], float] = {}
        self.processed: set[str] = set()
        self.duplicates = 0
        self.gave_up_at: float | None = None
        self.finished_at: float | None = None
        #: What the broker had in flight for the consumer when its first ACK went out.
        self.in_flight_at_first_ack: int | None = None
        self._current: Frame | None = None
        self._inbox: deque[Frame] = deque()
        self._refused_since: float | None = None

    @property
    def accepted(self) -> list[float]:
        return [t for t, ok, _ in self.attempts if ok]

    @property
    def refused(self) -> list[tuple[float, bool, str]]:
        return [a for a in self.attempts if not a[1]]

    def connect(self) -> None:
        net = self.net
        self._inbox = deque()
        c = net.client(
            f"consumer-{len(self.attempts) + 1}", recv_buffer=RECV_BUFFER, auto_read=False, send_buffer=SEND_BUFFER
        )
        headers = {"host": "localhost", "client-id": CLIENT_ID}
        if self.version != "1.0":
            headers.update({"accept-version": self.version, "heart-beat": f"{self.heart_beat_ms},0"})
        c.send_frame("CONNECT", headers)
        reply = self._next_frame(c)
        if reply is None or reply.command != "CONNECTED":
            self.attempts.append((net.now, False, reply.headers.get("message", "") if reply else "no answer"))
            if self._refused_since is None:
                self._refused_since = net.now
            if net.now - self._refused_since >= GIVE_UP_AFTER:
                self.gave_up_at = net.now
            else:
                net.at(net.now + RETRY_DELAY, self.connect)
            return
        self.attempts.append((net.now, True, ""))
        self._refused_since = None
        c.version = c.parser.version = reply.headers.get("version", "1.0")
        self.client = c
        sub = {"activemq.exclusive": "true"}
        if self.prefetch is not None:
            sub["activemq.prefetchSize"] = str(self.prefetch)
        c.subscribe(QUEUE, "0", "client", **sub)

    def tick(self) -> None:
        """Every WORK seconds: ACK the message in hand, read the next one."""
        c = self.client
        if c is None or self.finished_at is not None:
            return
        if c.closed:  # the broker ended it (link stealing, write timeout, heart-beats)
            self._reconnect(c)
            return
        m = self._current
        if m is not None:
            if self.in_flight_at_first_ack is None:
                session = self.net.broker.sessions[c.sid]
                self.in_flight_at_first_ack = len(session.subscriptions["0"].dispatched)
            try:
                c.ack(m)
            except PartialWrite as exc:
                self.partial_writes.append((self.net.now, exc.written, exc.total, "ACK"))
                self._reconnect(c)
                return
            self.ack_written[(c.tag, m.headers["message-id"])] = self.net.now
            self.net.trace.emit(
                "acked", client=c.name, session=c.tag, sub="0", dest=QUEUE, msg=m.headers["message-id"], mode="client"
            )
        self._current = self._next_message(c)
        if self._current is None and len(self.processed) >= MESSAGES:
            self.finished_at = self.net.now

    def beat(self) -> None:
        """Every heart-beat period: an EOL, if the send buffer takes it."""
        c = self.client
        if c is None or c.closed or self.finished_at is not None:
            return
        if c.write(b"\n") == 0:
            self.partial_writes.append((self.net.now, 0, 1, "heart-beat"))
            self._reconnect(c)

    def _next_frame(self, c: VirtualClient) -> Frame | None:
        while not self._inbox and c.inbound:
            self._inbox.extend(c.read(READ_CHUNK))
        return self._inbox.popleft() if self._inbox else None

    def _next_message(self, c: VirtualClient) -> Frame | None:
        while (f := self._next_frame(c)) is not None:
            if f.command == "MESSAGE":
                mid = f.headers["message-id"]
                self.duplicates += mid in self.processed
                self.processed.add(mid)
                return f
        return None

    def _reconnect(self, c: VirtualClient) -> None:
        self.client = None
        self._current = None
        if not c.closed:
            self.abandoned.append(c)
        self.connect()


# ---------------------------------------------------------------- the story
CURES = {
    "link-stealing": "the reconnect took the old connection over at once",
    "write-timeout": "the broker dropped the stuck connection itself and a reconnect got in",
    "heart-beats": "the broker noticed the silent connection and a reconnect got in",
}


def stalled_socket(lab: LabRun) -> Outcome:
    net = lab.network()
    producer = net.connected_client("producer")
    for _ in range(MESSAGES):
        producer.send(QUEUE, BODY, persistent="true")
    latency = net.config.store.store_latency
    consumer = PerlConsumer(
        net,
        prefetch=1 if lab.name == "prefetch-1" else None,
        heart_beat_ms=HEART_BEAT_MS if lab.name == "heart-beats" else 0,
    )
    consumer.connect()
    first = consumer.client
    assert first is not None
    prefetch = net.broker.sessions[first.sid].subscriptions["0"].prefetch
    net.every(WORK, consumer.tick, until=RUN_SECONDS)
    if consumer.heart_beat_ms:
        net.every(consumer.heart_beat_ms / 1000, consumer.beat, until=RUN_SECONDS)
    hb = f", heart-beat {consumer.heart_beat_ms},0" if consumer.heart_beat_ms else ""
    lab.note(
        f"{MESSAGES} persistent messages of {len(BODY)} B on {QUEUE}, store_latency {latency} ms; the consumer: "
        f"STOMP {consumer.version}{hb}, ack:client, client-id {CLIENT_ID}, prefetch {prefetch}, works "
        f"{WORK * 1000:.0f} ms per message, {SEND_BUFFER} B send buffer"
    )
    net.advance(RUN_SECONDS)

    trace = _Trace(lab.trace)
    in_flight = consumer.in_flight_at_first_ack or 0
    ack_cost = latency * (in_flight + 1) / 1000
    waits = trace.ack_waits(consumer.ack_written)
    written = trace.pending_bytes(first.tag)  # 0 when the connection ended before its first sample
    lab.note(
        f"at its first ACK the broker had {in_flight} message(s) in flight for it"
        + (f" ({written:,} B written to its socket and not read)" if written else "")
        + f": each ACK costs the store {latency} ms x {in_flight + 1} = {ack_cost:.3f} s, "
        f"and the broker reads nothing from the connection meanwhile"
    )
    if consumer.partial_writes:
        t, written, total, what = consumer.partial_writes[0]
        again = f"; {len(consumer.partial_writes) - 1} more later" if len(consumer.partial_writes) > 1 else ""
        lab.note(
            f"t={t:.2f}s: the consumer's {what} write failed part way: wrote {written} of {total} B "
            f"(the article: 'wrote 4 characters out of the 94 character frame'){again}"
        )
    if waits:
        lab.note(
            f"ACK latency, written by the consumer -> handled by the broker: median {_median(waits):.3f} s, "
            f"max {max(waits):.3f} s ({len(waits)} ACKs handled)"
        )
    refused = consumer.refused
    if refused:
        t, _, message = refused[0]
        more = f"; {len(refused) - 1} more, every {RETRY_DELAY:g} s" if len(refused) > 1 else ""
        lab.note(f"t={t:.2f}s: reconnect with client-id {CLIENT_ID} refused: ERROR '{message}'{more}")
    if consumer.abandoned:
        lab.note(trace.describe_old(consumer.abandoned[0], net))
    for line in trace.ends():
        lab.note(line)
    lab.note(
        f"processed {len(consumer.processed)} of {MESSAGES} messages in {RUN_SECONDS:.0f} s, "
        f"{consumer.duplicates} deliveries of messages already processed; "
        f"{len(consumer.accepted)} connection(s), {len(refused)} refused"
    )

    pathology, summary = _verdict(lab.name, consumer)
    metrics: dict[str, Any] = {
        "in_flight": in_flight,
        "ack_cost_s": round(ack_cost, 3),
        "ack_wait_max_s": round(max(waits), 3) if waits else 0.0,
        "partial_writes": len(consumer.partial_writes),
        "connects_refused": len(refused),
        "connects_accepted": len(consumer.accepted),
        "processed": len(consumer.processed),
        "messages": MESSAGES,
        "duplicates": consumer.duplicates,
        "queue_left": net.broker.destinations[QUEUE].size(),
    }
    return Outcome(pathology, summary, metrics=metrics)


def _verdict(run_name: str, consumer: PerlConsumer) -> tuple[bool, str]:
    """Pathology: the consumer gave up, every reconnect refused (or prefetch 1 did not run clean)."""
    if consumer.gave_up_at is not None:
        return True, (
            f"the consumer gave up at t={consumer.gave_up_at:.0f}s: every reconnect was refused while the "
            f"broker held the stalled connection ({len(consumer.processed)} of {MESSAGES} processed)"
        )
    clean = consumer.finished_at is not None and not consumer.partial_writes and not consumer.refused
    if clean:
        return False, f"the workload ran to the end at t={consumer.finished_at:.1f}s: no stall, no reconnect"
    if run_name.startswith("prefetch-1"):
        return True, "the consumer stalled even with prefetch 1"
    return False, (
        f"{CURES.get(run_name, 'the consumer got back in')}; but the stall came back: "
        f"{len(consumer.partial_writes)} failed writes, {len(consumer.processed)} of {MESSAGES} processed "
        f"in {RUN_SECONDS:.0f} s"
    )


class _Trace:
    """What the run's trace says about the consumer's connections."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace

    def samples(self, session: str) -> list[dict[str, Any]]:
        return [e for e in self.trace.events("connection") if e["session"] == session]

    def pending_bytes(self, session: str) -> int:
        return max((e["pending_bytes"] for e in self.samples(session)), default=0)

    def ack_waits(self, written: dict[tuple[str, str], float]) -> list[float]:
        """Seconds from each ACK's write to the broker's ``ack`` event for it."""
        return [
            e["ts"] - written[(e["session"], e["msg"])]
            for e in self.trace.events("ack")
            if (e["session"], e["msg"]) in written
        ]

    def describe_old(self, old: VirtualClient, net: VirtualNetwork) -> str:
        """The broker's last ``connection`` sample of the first connection the consumer left."""
        samples = self.samples(old.tag)
        state = "still held by the broker" if old.sid in net.broker.sessions else "ended by the broker"
        if not samples:
            return f"the connection the consumer left ({state}) was never sampled"
        s = samples[-1]
        return (
            f"the connection the consumer left, last sampled at t={s['ts']:.0f}s ({state}): "
            f"pending_bytes {s['pending_bytes']:,}, {s['pending']} unacked, "
            f"idle_read {s['idle_read']:.1f} s, idle_write {s['idle_write']:.1f} s"
        )

    def ends(self) -> list[str]:
        """How the broker ended consumer connections (link stealing, write timeout, heart-beats)."""
        ends = []
        for e in self.trace.events("error", "write_timeout"):
            if e["event"] == "write_timeout":
                ends.append((e["ts"], e["session"], f"write timeout, its writes stuck for {e['waited']:.1f} s"))
            elif e.get("session") is not None and "already connected" not in e["message"]:
                ends.append((e["ts"], e["session"], f"ERROR '{e['message']}'"))
        lines = [f"t={t:.2f}s: the broker ended connection {s}: {why}" for t, s, why in ends[:2]]
        if len(ends) > 2:
            lines.append(f"... and {len(ends) - 2} more the same way, the last at t={ends[-1][0]:.2f}s")
        return lines


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


# ---------------------------------------------------------------- appendix
def exclusive_appendix(lab: LabRun, *, exclusive: bool) -> Outcome:
    """Two equal consumers on one queue, with and without ``activemq.exclusive``.

    Both subscribe with prefetch 1 (the story's cure, so that the prefetch does
    not decide the shares) and ack one message every WORK seconds. 200
    messages arrive; then consumer A leaves and 100 more arrive.
    Pathology: B gets nothing while A is there (no load balancing).
    """
    net = lab.network()
    queue = "/queue/shared-work"
    headers = {"activemq.prefetchSize": "1"}
    if exclusive:
        headers["activemq.exclusive"] = "true"
    consumers = {name: net.connected_client(f"consumer-{name}") for name in ("A", "B")}
    for c in consumers.values():
        c.subscribe(queue, "0", "client-individual", **headers)
    acked = dict.fromkeys(consumers, 0)

    def work() -> None:
        for name, c in consumers.items():
            unacked = c.messages()[acked[name] :]
            if unacked and not c.closed:
                c.ack(unacked[0])
                acked[name] += 1

    producer = net.connected_client("producer")
    for _ in range(200):
        producer.send(queue, BODY)
    net.every(WORK, work)
    net.advance(200 * WORK + 1.0)
    phase1 = dict(acked)
    consumers["A"].disconnect()
    for _ in range(100):
        producer.send(queue, BODY)
    net.advance(100 * WORK + 1.0)
    phase2 = {name: acked[name] - phase1[name] for name in acked}
    mode = "activemq.exclusive:true" if exclusive else "no activemq.exclusive"
    lab.note(f"two consumers on {queue}, {mode}, prefetch 1, client-individual, {WORK * 1000:.0f} ms per message each")
    lab.note("200 messages with both: " + ", ".join(f"{n} got {phase1[n]} ({phase1[n] / 2:.0f}%)" for n in phase1))
    lab.note("then A disconnects and 100 more arrive: " + ", ".join(f"{n} got {phase2[n]}" for n in phase2))
    q = net.broker.destinations[queue]
    owner = q.exclusive_owner
    lab.note(
        f"the queue's exclusive owner now: {owner.session.peer if owner is not None else 'none'}; "
        f"{q.size()} messages left"
    )
    idle = min(phase1.values()) == 0
    summary = (
        f"no load balancing: {max(phase1, key=lambda n: phase1[n])} got all 200 while the other sat idle; "
        f"it only took over when the owner left"
        if idle
        else f"the two consumers shared the queue ({phase1['A']} / {phase1['B']})"
    )
    return Outcome(
        idle, summary, metrics={"a_share": phase1["A"], "b_share": phase1["B"], "b_after_a_left": phase2["B"]}
    )


# ---------------------------------------------------------------- the student's consumer
#: ``lab check 03 --client FILE.py``: messages waiting, and how long the consumer may take. A
#: consumer with one message in flight needs about CLIENT_MESSAGES x (WORK + 2 x 5 ms); one with
#: the default prefetch pays 5 ms for each message in flight on every ACK and cannot finish.
CLIENT_MESSAGES = 100
CLIENT_DEADLINE = float(os.environ.get("MINIBROKER_LAB_CLIENT_DEADLINE", "15"))  # a slow machine may want more


def run_client(lab: LabRun, path: Any) -> Outcome:
    """The student's consumer (``consume(host, port, queue, count, work)``) against the real
    server with the run's slow store: graded as the stalled consumer is, from what it processed,
    how many times, and how it acknowledged (the broker's trace)."""
    import asyncio

    from clients.labs import LabError
    from clients.labs.student import StudentError, run_consumer
    from clients.stomp import StompClient

    trace_file = lab.workdir / "trace.jsonl"
    config = lab.config.replace(broker={"trace": str(trace_file)})

    async def fill(port: int) -> None:
        producer = await StompClient.connect("127.0.0.1", port)
        for _ in range(CLIENT_MESSAGES):
            await producer.send(QUEUE, BODY, headers={"persistent": "true"}, receipt=True)
        await producer.disconnect()

    failure = ""
    run = None
    with lab.live_broker(config) as live:
        asyncio.run(fill(live.port))
        try:
            run = run_consumer(path, "127.0.0.1", live.port, QUEUE, CLIENT_MESSAGES, WORK, CLIENT_DEADLINE)
        except StudentError as exc:
            failure = str(exc)
        left = _settled_queue(live, CLIENT_DEADLINE - (run.seconds if run else CLIENT_DEADLINE))
    trace = sibling_module(__file__, "live")._read_trace(trace_file)
    connects = [e for e in trace if e["event"] == "connect"][1:]  # the first is the producer's
    if not connects:
        raise LabError(f"your client never connected to the broker (127.0.0.1, the port it was given): {failure}")
    if run is None:
        raise LabError(failure)
    subscriptions = [e for e in trace if e["event"] == "subscribe" and e.get("dest") == QUEUE]
    acks = sorted({e.get("ack", "auto") for e in subscriptions})
    prefetch = sorted({e.get("prefetch") for e in subscriptions if e.get("prefetch") is not None})
    processed = len(set(run.processed))
    settled = CLIENT_MESSAGES - left
    lab.note(
        f"your consumer: {len(connects)} connection(s), subscribed with ack {', '.join(acks) or 'none'}, "
        f"prefetch {', '.join(map(str, prefetch)) or 'none'}"
    )
    lab.note(
        f"{run.story(CLIENT_MESSAGES, CLIENT_DEADLINE)}; the broker settled {settled} of the {CLIENT_MESSAGES} "
        f"(acknowledged and gone from {QUEUE}) within {CLIENT_DEADLINE:.0f} s"
    )
    pathology = settled < CLIENT_MESSAGES
    summary = (
        f"only {settled} of {CLIENT_MESSAGES} messages settled in {CLIENT_DEADLINE:.0f} s: the consumer's ACKs stalled"
        if pathology
        else f"all {CLIENT_MESSAGES} messages processed and settled in {run.seconds:.1f} s"
    )
    metrics = {
        "processed_pct": round(100 * min(processed, settled) / CLIENT_MESSAGES),
        "duplicates": run.duplicates,
        "client_acks": int(bool(acks) and "auto" not in acks),
    }
    return Outcome(pathology, summary, metrics=metrics)


def _settled_queue(live: Any, seconds: float) -> int:
    """Messages still on the queue (waiting or unacknowledged) once it empties or ``seconds`` pass."""
    import time

    def left() -> int:
        destination = live.server.broker.destinations.get(QUEUE)
        return int(destination.size()) if destination is not None else 0

    until = time.monotonic() + max(seconds, 0.0)
    while (remaining := left()) and time.monotonic() < until:
        time.sleep(0.1)
    return remaining
