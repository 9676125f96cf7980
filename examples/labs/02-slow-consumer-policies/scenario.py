"""The slow-consumers trap: one slow consumer on a non-durable topic, under each policy.

``run(lab)`` plays one workload on the virtual clock; only the broker
configuration differs, except in the ``stuck-socket*`` runs, where the slow
subscriber is replaced by one that stops reading its socket altogether:

- topic ``/topic/ticks``, subscribed in this order by ``fast-1``, ``slow``,
  ``fast-2`` and ``fast-3``; the fast ones are auto-ack; ``slow`` takes 10
  ahead (client-individual, prefetch 10) and acknowledges 10 a second;
- a producer sends non-persistent 1000-byte messages, at most 50 a second,
  each waiting for its RECEIPT (a synchronous send);
- 30 virtual seconds; rates are measured from t=10 s to t=30 s, once each
  policy has had time to act.

Pathology: the fast consumers get less than 80% of the producer's 50 msg/s:
the slow (or stuck) consumer holds everyone back. Every run prints its row of
the cost table; the last run prints the whole table.

``run_live(lab)`` plays the same workload against the real server on real
sockets, four times faster (``live.py``); both build a ``Seen`` from their
clients and broker, and ``verdict`` judges it the same way.
``run_activemq(lab, broker)`` plays the live workload against ActiveMQ (``lab
run 02 --against activemq``), started with ``activemq_config``: the live run's
configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clients.labs import LabRun, Outcome, sibling_module
from minibroker.config import BrokerConfig
from minibroker.ops import statistics_replies

TOPIC = "/topic/ticks"
BODY = "x" * 1000
SECONDS, WINDOW_FROM = 30.0, 10.0
RATE = 50  # the producer's own pace, msg/s
SLOW_RATE = 10  # the slow consumer's acks, msg/s
SLOW_PREFETCH = 10
HEALTHY_SHARE = 0.8
SUBSCRIBERS = ("fast-1", "slow", "fast-2", "fast-3")  # dispatch order
KB = 1024

#: The cost table's rows, one per run of this ``minibroker lab run`` (the
#: runner loads the scenario once and calls ``run`` for each configuration).
ROWS: list[dict[str, Any]] = []
COLUMNS = (
    ("run", "run"),
    ("producer", "producer msg/s"),
    ("fast", "fast msg/s"),
    ("slow", "slow msg/s"),
    ("lag", "slow lag s"),
    ("backlog", "slow backlog"),
    ("discarded", "discarded"),
    ("aborted", "aborted"),
    ("temp_kb", "temp disk KB"),
    ("verdict", "verdict"),
)


class Producer:
    """A synchronous producer: the next SEND only once the last one has its RECEIPT."""

    def __init__(self, client: Any, now: Any) -> None:
        self.client = client
        self.now = now
        self.sent_at: list[float] = []

    def receipted(self) -> int:
        return len(self.client.frames("RECEIPT"))

    def tick(self) -> None:
        n = len(self.sent_at)
        if self.receipted() == n:
            self.sent_at.append(self.now())
            self.client.send(TOPIC, BODY, receipt=f"r{n}", seq=str(n))


class SlowConsumer:
    """Acknowledges one message per tick, in order, while it has any and is subscribed.

    Once an ERROR frame names its subscription (``abort_slow_consumer``), it
    stops acknowledging: the broker would take an ACK for a message of the
    aborted subscription as a protocol error and close the whole connection
    (see tests/labs/test_lab_slow_consumers.py for the broker change that would
    make this unnecessary).
    """

    def __init__(self, client: Any, sub_id: str) -> None:
        self.client = client
        self.sub_id = sub_id
        self.acked = 0

    def aborted(self) -> bool:
        return any(f.headers.get("subscription") == self.sub_id for f in self.client.frames("ERROR"))

    def tick(self) -> None:
        c = self.client
        if c.closed or self.aborted():
            return
        messages = c.messages()
        if self.acked < len(messages):
            c.ack(messages[self.acked])
            self.acked += 1


@dataclass(frozen=True)
class Pace:
    """The workload's figures: the virtual run's, or the live run's (``live.py``)."""

    rate: float  # the producer's own pace, msg/s
    slow_rate: float  # the slow consumer's acks, msg/s
    seconds: float
    window_from: float  # rates are measured from here to the end
    #: The fast consumers are held back below this many msg/s (the verdict).
    held_below: float
    body: int  # bytes per message


VIRTUAL = Pace(RATE, SLOW_RATE, SECONDS, WINDOW_FROM, HEALTHY_SHARE * RATE, len(BODY))


@dataclass
class Seen:
    """What one run saw, from the clients and from the broker, on either clock.

    ``events`` are the trace's events (``ts`` in seconds from the run's start);
    the ``*_session`` fields are the trace's ``session`` of the slow (or stuck)
    consumer and of the producer."""

    pace: Pace
    producer_rate: float
    fast_rate: float
    slow_rate: float
    lag: float | None
    sent: int
    slow_closed: bool
    slow_errors: list[dict[str, str]]
    discarded: int
    temp_kb: int
    temp_pct: int
    backlog: int
    events: list[dict[str, Any]]
    slow_session: str
    producer_session: str
    log_lines: list[str]
    stuck_connection: dict[str, Any] | None
    slow_subscription: dict[str, Any] | None
    memory_kb: int

    def trace(self, *names: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] in names]


def run(lab: LabRun) -> Outcome:
    if lab.spec.name == lab.lab.runs[0].name:
        ROWS.clear()
    stuck = lab.name.startswith("stuck-socket")
    net = lab.network()
    clients: dict[str, Any] = {}
    for name in SUBSCRIBERS:
        if name != "slow":
            c = net.connected_client(name)
            c.subscribe(TOPIC, name)
        elif stuck:
            c = net.client("stuck", recv_buffer=8192, auto_read=False)
            c.connect()
            c.read()  # CONNECTED; after this it reads nothing
            c.subscribe(TOPIC, "stuck")
        else:
            c = net.connected_client(name)
            c.subscribe(TOPIC, name, "client-individual", **{"activemq.prefetchSize": str(SLOW_PREFETCH)})
        clients[name] = c
    slow = SlowConsumer(clients["slow"], "slow")
    fast = [clients[n] for n in SUBSCRIBERS if n.startswith("fast")]
    producer = Producer(net.connected_client("producer"), lambda: net.now)

    marks: dict[str, int] = {}

    def mark() -> None:
        marks.update(
            producer=producer.receipted(),
            fast=sum(len(c.messages()) for c in fast),
            slow=len(clients["slow"].messages()),
        )

    net.every(1 / RATE, producer.tick, until=SECONDS)
    if not stuck:
        net.every(1 / SLOW_RATE, slow.tick, until=SECONDS)
    net.at(WINDOW_FROM, mark)
    net.advance(SECONDS)
    return verdict(lab, _seen(lab, net, producer, clients, fast, marks), stuck)


def run_live(lab: LabRun) -> Outcome:
    """The same workload against the real server on real sockets, faster: ``live.py``."""
    return verdict(lab, sibling_module(__file__, "live").play(lab, Seen, Pace), lab.name.startswith("stuck-socket"))


def run_client(lab: LabRun, path: Any) -> Outcome:
    """The student's slow subscriber against the real server (``live.play_client``): held back
    when the producer goes under twice the slow pace; healthy only when, besides, what the
    subscriber processed last is the newest tick, not one from a backlog it moved into itself."""
    live = sibling_module(__file__, "live")
    seen = live.play_client(lab, path)
    run, slow_rate = seen["run"], 1 / live.CLIENT_WORK
    lab.note(run.story(live.CLIENT_TICKS, live.CLIENT_DEADLINE))
    lab.note(
        f"the producer sent {seen['sent']} of {live.CLIENT_TICKS} ticks, {seen['producer_rate']} a second "
        f"from t={live.CLIENT_WINDOW_FROM:.0f} s (your work takes {live.CLIENT_WORK * 1000:.0f} ms a tick: "
        f"{slow_rate:.0f} a second); the newest tick you processed is {seen['behind']} behind the last one sent"
    )
    held = seen["producer_rate"] < 2 * slow_rate
    summary = (
        f"the producer is held to your pace: {seen['producer_rate']} ticks a second"
        if held
        else f"the producer keeps its pace ({seen['producer_rate']} a second); you ended {seen['behind']} tick(s) behind"
    )
    metrics = {"producer_rate": seen["producer_rate"], "ticks_behind": seen["behind"]}
    return Outcome(held, summary, metrics=metrics)


def activemq_config(config: BrokerConfig) -> BrokerConfig:
    """What ActiveMQ is started with (``lab run 02 --against activemq``): the live run's
    configuration (its durations a quarter, its memory 2 MB), as the live run's broker."""
    return sibling_module(__file__, "live").live_config(config, None)


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The live workload against ActiveMQ with the same clients; the same rule (the fast
    consumers held under twice the slow one's pace), from what the clients saw and ActiveMQ's log."""

    def logged(stuck: bool, seen: dict[str, Any]) -> bool:
        lines = [
            next(iter(broker.log(needle)), "")
            for needle in ("Pending message cursor [", "aborting", "Forced write timeout")
        ]
        for line in filter(None, lines):
            lab.note(f"ActiveMQ's log: {line.split(' | ')[2] if line.count(' | ') >= 2 else line}")
        for error in seen["slow_errors"]:
            headers = ", ".join(f"{k}:{v}" for k, v in error.items())
            lab.note(f"the slow client got ERROR [{headers}]")
        lab.note(
            f"the {'stuck' if stuck else 'slow'} consumer's connection is "
            f"{'closed' if seen['slow_closed'] else 'still open'} at the end"
        )
        # ActiveMQ holds the fast consumers back only by blocking the producer: a full subscription's
        # cursor (which it logs) or a dispatch stuck on a socket (the producer stops).
        return bool(broker.log("blocking message add()"))

    return _elsewhere(lab, broker, "ActiveMQ", "logged no blocked dispatch", logged)


def run_rabbitmq(lab: LabRun, broker: Any) -> Outcome:
    """The live workload against a RabbitMQ node with the same clients; the same rule, from
    what the clients saw and its log.

    RabbitMQ gives each topic subscriber a queue of its own: a slow one's queue grows (and
    RabbitMQ ignores ``activemq.prefetchSize``: no prefetch limit) without holding the
    producer, until a memory or disk alarm blocks every publishing connection."""

    def logged(stuck: bool, seen: dict[str, Any]) -> bool:
        alarms = broker.log("resource limit alarm set")
        for line in alarms[:1]:
            lab.note(f"RabbitMQ's log: {line.split('] ', 1)[-1]}")
        return bool(alarms)  # RabbitMQ holds publishers back by its resource alarms, which it logs

    return _elsewhere(lab, broker, "RabbitMQ", "raised no alarm", logged)


def _elsewhere(
    lab: LabRun, broker: Any, name: str, not_held: str, logged: Callable[[bool, dict[str, Any]], bool]
) -> Outcome:
    """The live workload on another broker (``name``), judged by the live run's rule.

    ``logged(stuck, seen)`` notes what that broker's log says and whether it held the producer
    back; fast consumers held back while it did not (it ``not_held``) and the producer went
    on: the pace was the machine's, not a fair run."""
    live = sibling_module(__file__, "live")
    stuck = lab.name.startswith("stuck-socket")
    pace = live.live_pace(Pace)
    seen = live.play_on(broker.port, stuck)
    lab.note(
        f"the live workload ({live.SPEED} times the virtual run's pace, {pace.seconds:.0f} s, {pace.body}-byte "
        f"messages), the same clients; {name}'s figures are what they saw and its log"
    )
    holding = logged(stuck, seen)
    lab.note(
        f"from t={pace.window_from:.0f} s to t={pace.seconds:.0f} s: producer {seen['producer_rate']:.1f} msg/s, fast "
        f"consumers {seen['fast_rate']:.1f} msg/s each, the {'stuck' if stuck else 'slow'} one {seen['slow_rate']:.1f} msg/s"
    )
    held = seen["fast_rate"] < pace.held_below
    summary = (
        f"the fast consumers get {seen['fast_rate']:.1f} msg/s of the producer's {pace.rate:g}: held back by the "
        f"{'stuck' if stuck else 'slow'} one"
        if held
        else f"the fast consumers keep up ({seen['fast_rate']:.1f} msg/s)"
    )
    metrics = {k: round(seen[k], 1) for k in ("producer_rate", "fast_rate", "slow_rate")}
    unfair = ""
    if held and not holding and seen["producer_rate"] > 0:
        unfair = (
            f"the fast consumers got {seen['fast_rate']:.1f} msg/s, under {pace.held_below:g}, while {name} "
            f"{not_held} and the producer went on at {seen['producer_rate']:.1f} msg/s"
        )
    return Outcome(
        held, summary, metrics={**metrics, "sent": seen["sent"], "slow_closed": seen["slow_closed"]}, unfair=unfair
    )


def _seen(
    lab: LabRun, net: Any, producer: Producer, clients: dict[str, Any], fast: list[Any], marks: dict[str, int]
) -> Seen:
    """The virtual run's figures, read from its clients and its broker."""
    broker = net.broker
    topic = broker.destinations[TOPIC]
    span = SECONDS - WINDOW_FROM
    slow_client = clients["slow"]
    received = slow_client.messages()
    stuck = next(
        (
            c
            for c in statistics_replies(broker, "/queue/ActiveMQ.Statistics.Connection")
            if c["connection"] == slow_client.sid
        ),
        None,
    )
    sub = next(
        (
            s
            for s in statistics_replies(broker, "/queue/ActiveMQ.Statistics.Subscription")
            if s["connection"] == slow_client.sid
        ),
        None,
    )
    return Seen(
        pace=VIRTUAL,
        producer_rate=(producer.receipted() - marks["producer"]) / span,
        fast_rate=(sum(len(c.messages()) for c in fast) - marks["fast"]) / len(fast) / span,
        slow_rate=(len(received) - marks["slow"]) / span,
        lag=round(net.now - producer.sent_at[int(received[-1].headers["seq"])], 1) if received else None,
        sent=len(producer.sent_at),
        slow_closed=slow_client.closed,
        slow_errors=[dict(f.headers) for f in slow_client.frames("ERROR")],
        discarded=topic.discarded,
        temp_kb=broker.temp_usage.peak // KB,
        temp_pct=broker.temp_usage.peak * 100 // broker.temp_usage.limit,
        backlog=sum(len(s.pending) for s in topic.subs if s.session.id == slow_client.sid),
        events=lab.trace.events(),
        slow_session=slow_client.tag,
        producer_session=producer.client.tag,
        log_lines=lab.broker_log(),
        stuck_connection=stuck,
        slow_subscription=sub,
        memory_kb=lab.config.system_usage.memory_limit // KB,
    )


def verdict(lab: LabRun, seen: Seen, stuck: bool) -> Outcome:
    """The run's verdict, evidence and row of the cost table, from what it saw."""
    pace = seen.pace
    who = (
        "'stuck' stops reading its socket after CONNECTED"
        if stuck
        else f"'slow' has prefetch {SLOW_PREFETCH} and acks {pace.slow_rate:g}/s"
    )
    lab.note(
        f"workload: {TOPIC}, subscribers {', '.join(SUBSCRIBERS)} in dispatch order ({who}); producer up to "
        f"{pace.rate:g} msg/s of {pace.body} B, each SEND waiting for its RECEIPT; {pace.seconds:.0f} s, rates "
        f"from t={pace.window_from:.0f} s; memory {seen.memory_kb} KB"
    )
    aborted = [e for e in seen.trace("unsubscribe") if e.get("reason") == "abort"]
    closed = [e for e in seen.trace("disconnect") if e["session"] == seen.slow_session]
    dropped = len(aborted) + len([e for e in closed if not aborted])

    # -- what the slow (or stuck) consumer did to the others, from the trace and the log
    slow_marks = [e for e in seen.trace("slow_consumer") if e["session"] == seen.slow_session]
    if slow_marks:
        first = slow_marks[0]
        lab.note(
            f"slow-consumer detector: '{first['sub']}' marked slow at t={first['ts']:.1f} s ({first['pending']} "
            f"pending > prefetch {first['prefetch']}); {len(slow_marks)} slow_consumer event(s)"
        )
    cursor_line = next((line for line in seen.log_lines if "Pending message cursor [" in line), None)
    if cursor_line:
        lab.note(f"broker log: {cursor_line}")
    flow = [e for e in seen.trace("flow_block", "flow_unblock") if e["session"] == seen.producer_session]
    blocks = [e for e in flow if e["event"] == "flow_block"]
    if blocks:
        still = flow[-1]["event"] == "flow_block"
        lab.note(
            f"trace: {len(blocks)} flow_block for the producer (first at t={blocks[0]['ts']:.1f} s, {blocks[0]['usage']} "
            f"{blocks[0]['pct']}%){'; the last has no flow_unblock: blocked to the end' if still else ''}"
        )
    swaps = seen.trace("swap_out")
    if swaps:
        lab.note(
            f"t={swaps[0]['ts']:.1f} s: swap_out of {swaps[0]['count']} messages (the whole memory list) to the temp "
            f"store; {len(swaps)} swap_out event(s); temp usage peaked at {seen.temp_kb} KB "
            f"({seen.temp_pct}% of the limit)"
        )
    discards = seen.trace("discard")
    if discards:
        lab.note(
            f"trace: {len(discards)} discard events ({discards[0]['reason']}), first at t={discards[0]['ts']:.1f} s; "
            f"the topic counts discarded={seen.discarded}"
        )
    for e in aborted:
        lab.note(f"trace: t={e['ts']:.1f} s unsubscribe of '{e['sub']}' with reason abort")
    for error in seen.slow_errors:
        headers = ", ".join(f"{k}:{v}" for k, v in error.items())
        lab.note(
            f"the slow client got ERROR [{headers}]; its connection is {'closed' if seen.slow_closed else 'still open'}"
        )
    for e in seen.trace("write_timeout"):
        lab.note(
            f"trace: t={e['ts']:.1f} s write_timeout for session {e['session']}: its socket took nothing for "
            f"{e['waited']:.1f} s; then disconnect with reason {next((d['reason'] for d in closed), '?')}"
        )
    forced = next((line for line in seen.log_lines if line.startswith("Forced write timeout")), None)
    if forced:
        lab.note(f"broker log: {forced}")
    conn = seen.stuck_connection
    if stuck and not seen.slow_closed and conn is not None:
        lab.note(
            f"minibroker stat --connections, the stuck one: {conn['outboundQueuedBytes'] // KB} KB queued, "
            f"transportPaused {conn['transportPaused']}, {conn['secondsSinceLastWrite']:.0f} s since its socket "
            f"took anything"
        )
    sub = seen.slow_subscription
    if sub is not None:
        lab.note(
            f"minibroker stat --subscriptions --json, '{sub['subscription']}': pending {sub['pendingQueueSize']}, "
            f"dispatched {sub['dispatchedQueueSize']}, slowConsumer {sub['slowConsumer']}, "
            f"discarded {sub['discarded']}"
        )
    lag = seen.lag
    lag_text = f"; its last message was sent {lag:.1f} s before the end" if lag is not None else ""
    lab.note(
        f"from t={pace.window_from:.0f} s to t={pace.seconds:.0f} s: producer {seen.producer_rate:.1f} msg/s, fast "
        f"consumers {seen.fast_rate:.1f} msg/s each, the {'stuck' if stuck else 'slow'} one {seen.slow_rate:.1f} "
        f"msg/s{lag_text}"
    )

    held = seen.fast_rate < pace.held_below
    # Held back by whom? A slow (or stuck) consumer holds the fast ones back through the
    # producer, which flow control blocks (in the window, or since before it and to the end).
    # Rates that low with the producer never blocked were set by a machine too busy to go faster.
    before = [e for e in flow if e["ts"] < pace.window_from]
    blocked_in_window = any(e["event"] == "flow_block" for e in flow if e["ts"] >= pace.window_from) or bool(
        before and before[-1]["event"] == "flow_block"
    )
    unfair = (
        f"the fast consumers got {seen.fast_rate:.1f} msg/s, under {pace.held_below:g}, while flow control never "
        f"held the producer from t={pace.window_from:.0f} s: the machine set that pace, not the "
        f"{'stuck' if stuck else 'slow'} consumer"
        if held and not blocked_in_window
        else ""
    )
    row = {
        "run": lab.name,
        "producer": f"{seen.producer_rate:.1f}",
        "fast": f"{seen.fast_rate:.1f}",
        "slow": f"{seen.slow_rate:.1f}",
        "lag": "-" if lag is None or dropped else f"{lag:.1f}",
        "backlog": str(seen.backlog),
        "discarded": str(seen.discarded),
        "aborted": str(dropped),
        "temp_kb": str(seen.temp_kb),
        "verdict": "pathology" if held else "healthy",
    }
    ROWS.append(row)
    if lab.spec.name == lab.lab.runs[-1].name:
        lab.note("cost table (every run of this lab):")
        for line in table(ROWS):
            lab.note(line)
    if held:
        summary = (
            f"the fast consumers get {seen.fast_rate:.1f} msg/s of the producer's {pace.rate:g}: held back by the "
            f"{'stuck' if stuck else 'slow'} one"
        )
    else:
        cost = []
        if seen.discarded:
            cost.append(f"the slow one lost {seen.discarded} messages")
        if dropped:
            cost.append(
                f"the {'stuck' if stuck else 'slow'} consumer was "
                + ("disconnected" if seen.slow_closed else "unsubscribed")
            )
        if seen.temp_kb:
            cost.append(
                f"{seen.temp_kb} KB of temp disk for a backlog of {seen.backlog}, the slow one {lag or 0:.0f} s behind "
                "and falling further"
            )
        summary = f"the fast consumers keep up ({seen.fast_rate:.1f} msg/s); cost: {'; '.join(cost) or 'none'}"
    metrics = {
        "producer_rate": round(seen.producer_rate, 1),
        "fast_rate": round(seen.fast_rate, 1),
        "slow_rate": round(seen.slow_rate, 1),
        "slow_lag": lag,
        "discarded": seen.discarded,
        "aborted": dropped,
        "temp_peak_kb": seen.temp_kb,
        "backlog": seen.backlog,
        "flow_blocks": len(blocks),
        "sent": seen.sent,
    }
    return Outcome(held, summary, metrics=metrics, unfair=unfair)


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The cost table as Markdown lines."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row[key] for key, _ in COLUMNS) + " |" for row in rows]
    return lines
