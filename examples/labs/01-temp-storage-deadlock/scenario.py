"""The temp-storage trap: a temp limit below the temp file size blocks topic producers forever.

``run(lab)`` plays one workload on the virtual clock in every run; only the
broker configuration differs (``deadlock.toml``, ``cure.toml``, ``vm.toml``):

- topic ``/topic/prices``, subscribed in this order by ``slow-1``, ``fast-1``,
  ``fast-2`` and ``slow-2``; the slow ones take 10 messages ahead
  (client-individual, prefetch 10) and acknowledge 20 a second; the fast ones
  are auto-ack;
- a producer sends 600 non-persistent 1000-byte messages as fast as it is let,
  at most 50 a second, each waiting for its RECEIPT (a synchronous send); at
  t=40 s, 50 more;
- the run lasts 60 virtual seconds.

Pathology: at the end the producer is still waiting for a RECEIPT while no
subscription has anything pending: from outside, the broker or the producer
looks hung. ``run_live(lab)`` shows the same with real sockets in about two
seconds; ``run_activemq(lab, broker)`` plays it against ActiveMQ (``lab run 01
--against activemq``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from clients.labs import LabRun, Outcome
from minibroker.ops import statistics_replies

TOPIC = "/topic/prices"
BODY = "x" * 1000
SECONDS = 60.0
BURST, LATER, LATER_AT = 600, 50, 40.0
PRODUCER_PERIOD = 0.02  # at most 50 msg/s
SLOW_PERIOD = 0.05  # each slow subscriber acknowledges 20 msg/s
SLOW_PREFETCH = "10"
SUBSCRIBERS = ("slow-1", "fast-1", "fast-2", "slow-2")  # dispatch order
KB = 1024


class Producer:
    """A synchronous producer: the next SEND only once the last one has its RECEIPT.

    (A plain class: the labs loader does not register scenario modules in
    ``sys.modules``, which ``@dataclass`` needs; see tests/labs/test_lab_temp_storage.py.)
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.budget = BURST
        self.sent = 0
        self.burst_done_at: float | None = None

    def receipted(self) -> int:
        return len(self.client.frames("RECEIPT"))

    def tick(self, now: float) -> None:
        done = self.receipted()
        if self.burst_done_at is None and done >= BURST:
            self.burst_done_at = now
        if self.sent < self.budget and done == self.sent:
            self.client.send(TOPIC, BODY, receipt=f"r{self.sent}", seq=str(self.sent))
            self.sent += 1


def run(lab: LabRun) -> Outcome:
    net = lab.network()
    clients = {}
    for name in SUBSCRIBERS:
        c = net.connected_client(name)
        if name.startswith("slow"):
            c.subscribe(TOPIC, name, "client-individual", **{"activemq.prefetchSize": SLOW_PREFETCH})
            c.acked = 0
        else:
            c.subscribe(TOPIC, name)
        clients[name] = c
    slow = [c for n, c in clients.items() if n.startswith("slow")]
    fast = [c for n, c in clients.items() if n.startswith("fast")]
    producer = Producer(net.connected_client("producer"))

    def slow_ack() -> None:
        for c in slow:
            messages = c.messages()
            if c.acked < len(messages):
                c.ack(messages[c.acked])
                c.acked += 1

    def later() -> None:
        producer.budget = BURST + LATER

    cfg = lab.config
    lab.note(
        f"workload: /topic/prices with subscribers {', '.join(SUBSCRIBERS)} (dispatch order); slow ones: prefetch "
        f"{SLOW_PREFETCH}, 20 acks/s; producer: {BURST} messages of 1000 bytes, at most 50/s, each waiting for its "
        f"RECEIPT, {LATER} more at t={LATER_AT:.0f} s; broker memory {cfg.system_usage.memory_limit // KB} KB, "
        f"temp limit {cfg.system_usage.temp_limit // KB} KB, temp files {cfg.store.temp_journal_max_file_length // KB} KB, "
        f"cursor {cfg.policy_for('topic', 'prices').pending_cursor}"
    )
    net.every(PRODUCER_PERIOD, lambda: producer.tick(net.now), until=SECONDS)
    net.every(SLOW_PERIOD, slow_ack, until=SECONDS)
    net.at(LATER_AT, later)
    net.advance(SECONDS)
    return _verdict(lab, net, producer, slow, fast, lab.broker_log())


def _verdict(
    lab: LabRun, net: Any, producer: Producer, slow: list[Any], fast: list[Any], log_lines: list[str]
) -> Outcome:
    broker = net.broker
    topic = broker.destinations[TOPIC]
    trace = lab.trace
    temp = broker.temp_usage
    psession = producer.client.tag

    swaps = trace.events("swap_out")
    if swaps:
        first = swaps[0]["ts"]
        together = [e for e in swaps if e["ts"] == first]
        moved = ", ".join(f"{e['sub']} {e['count']}" for e in together)
        lab.note(
            f"t={first:.2f} s: memory reached the 70% mark; each file cursor swapped its whole memory list to the temp "
            f"store in one go ({moved} messages); temp usage 0% -> {together[-1]['temp_pct']}% (one whole "
            f"{broker.config.store.temp_journal_max_file_length // KB} KB file); {len(swaps)} swap_out event(s) in all"
        )
    else:
        lab.note(
            f"no swap_out: nothing went to the temp store; memory peaked at {broker.memory.peak * 100 // broker.memory.limit}%"
        )
    cursor_line = next((line for line in log_lines if "Pending message cursor [" in line), None)
    if cursor_line:
        lab.note(f"broker log (the article's line): {cursor_line}")
    temp_full = next((line for line in log_lines if line.startswith("Temp Store is Full")), None)
    if temp_full:
        lab.note(f"broker log: {temp_full}")

    flow = [e for e in trace.events("flow_block", "flow_unblock") if e["session"] == psession]
    blocks = [e for e in flow if e["event"] == "flow_block"]
    unblocks = len(flow) - len(blocks)
    waited = sum(e["waited"] for e in flow if e["event"] == "flow_unblock")
    open_block = flow[-1] if flow and flow[-1]["event"] == "flow_block" else None
    blocked_for = SECONDS - open_block["ts"] if open_block else 0.0
    if open_block:
        lab.note(
            f"trace: {len(blocks)} flow_block, {unblocks} flow_unblock for the producer; the last flow_block "
            f"(t={open_block['ts']:.2f} s, usage {open_block['usage']} at {open_block['pct']}%) has no flow_unblock: "
            f"blocked for {blocked_for:.1f} s at the end of the run"
        )
    elif blocks:
        lab.note(
            f"trace: {len(blocks)} flow_block, each with its flow_unblock (waited {waited:.1f} s in all): the producer "
            f"was held to the slow subscribers' pace, never stuck"
        )
    else:
        lab.note("trace: no flow_block: the producer never waited")

    pending = sum(len(s.pending) + len(s.dispatched) for s in topic.subs)
    receipted = producer.receipted()
    lab.note(
        f"after {SECONDS:.0f} s: producer sent {producer.sent} of {BURST + LATER} ({receipted} receipted); "
        f"fast subscribers received {'/'.join(str(len(c.messages())) for c in fast)}, slow ones acked "
        f"{'/'.join(str(c.acked) for c in slow)}; messages pending for the subscriptions: {pending}"
    )
    if producer.burst_done_at is not None:
        lab.note(
            f"the first {BURST} messages took {producer.burst_done_at:.1f} s ({BURST / producer.burst_done_at:.0f} msg/s; "
            f"{BURST / 50:.0f} s at the producer's own pace)"
        )
    if temp.peak:
        for f in broker.storehooks.temp_store().files():
            lab.note(
                f"temp store: {f.name}, {f.size // KB} KB, {f.referenced} entries still referenced"
                f"{', the current write file (never deleted)' if f.current else ''}"
            )
    lab.note(
        f"temp usage {temp.usage // KB} KB = {temp.percent}% of the {temp.limit // KB} KB limit "
        f"(peak {temp.peak * 100 // temp.limit}%)"
    )
    stats = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Broker")[0]
    lab.note(
        f"minibroker stat: size {stats['size']}, memoryPercentUsage {stats['memoryPercentUsage']}, "
        f"tempPercentUsage {stats['tempPercentUsage']}, blockedProducers {stats['blockedProducers']}"
    )

    hung = producer.sent > receipted and pending == 0 and open_block is not None
    if hung:
        summary = (
            f"the producer hangs: blocked for {blocked_for:.0f} s with nothing pending for anyone, temp usage "
            f"stuck at {temp.percent}% by a temp file that is never deleted"
        )
    elif producer.burst_done_at is not None and producer.burst_done_at > BURST / 50 * 1.5:
        summary = (
            f"everything delivered ({receipted} messages), but the producer was held to the slow subscribers' "
            f"pace: {BURST} messages in {producer.burst_done_at:.1f} s"
        )
    else:
        summary = (
            f"everything delivered ({receipted} messages), the producer never held up; temp usage "
            f"{temp.percent}% (peak {temp.peak * 100 // temp.limit}%)"
        )
    metrics = {
        "sent": producer.sent,
        "receipted": receipted,
        "pending": pending,
        "temp_pct": temp.percent,
        "temp_peak_pct": temp.peak * 100 // temp.limit,
        "swap_outs": len(swaps),
        "flow_blocks": len(blocks),
        "flow_unblocks": unblocks,
        "blocked_for": round(blocked_for, 1),
        "burst_seconds": round(producer.burst_done_at, 1) if producer.burst_done_at else None,
    }
    return Outcome(hung, summary, metrics=metrics)


# ---------------------------------------------------------------------- live
LIVE_HANG = 1.5  # seconds the last SEND waits for its RECEIPT before the producer counts as hung


def run_live(lab: LabRun) -> Outcome:
    """The same trap on the real server: stuck slow subscribers, then drained."""
    with lab.live_broker() as live:
        result = asyncio.run(play_on(live.port, lambda: _live_state(live)))
    log_lines = lab.broker_log()
    state = result.pop("state")
    cursor_line = next((line for line in log_lines if "Pending message cursor [" in line), None)
    if cursor_line:
        lab.note(f"broker log (the article's line): {cursor_line}")
    for name, referenced, current in state["files"]:
        lab.note(f"temp store: {name}, {referenced} entries referenced{', current (never deleted)' if current else ''}")
    _note_clients(lab, result, f"messages pending for the subscriptions then: {state['pending']}")
    lab.note(f"minibroker stat: tempPercentUsage {state['temp_pct']}, blockedProducers {state['blocked']}")
    hung = result["stuck"] and state["pending"] == 0 and state["blocked"] > 0
    summary = (
        f"the producer hangs with nothing pending; temp usage {state['temp_pct']}%"
        if hung
        else f"the producer went on; temp usage {state['temp_pct']}%"
    )
    return Outcome(
        hung,
        summary,
        metrics={
            **result,
            "temp_pct": state["temp_pct"],
            "pending": state["pending"],
            "blocked_producers": state["blocked"],
        },
    )


def _note_clients(lab: LabRun, result: dict[str, Any], pending: str) -> None:
    lab.note(
        f"real sockets: {result['sent']} sent, {result['receipted']} receipted; the slow subscribers acked "
        f"{result['acked']}, the fast ones received {result['fast']}; one more SEND waited {result['waited']:.1f} s "
        f"for its RECEIPT{' and never got it' if result['stuck'] else ''}; {pending}"
    )


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The live run against ActiveMQ (``lab run 01 --against activemq``): the same clients; the
    verdict from what they saw (the last SEND never receipted although every subscriber has
    drained what it was sent) and ActiveMQ's own log line."""
    result = asyncio.run(play_on(broker.port, lambda: {}))
    result.pop("state")
    full = broker.log("is full, temp usage")
    if full:
        lab.note(
            f"ActiveMQ's log (the article's line): {full[-1].split(' | ')[2] if full[-1].count(' | ') >= 2 else full[-1]}"
        )
    _note_clients(lab, result, "every subscriber had drained what reached it")
    hung = result["stuck"]
    summary = (
        "the producer hangs: its SEND is never receipted though every subscriber has drained"
        if hung
        else "the producer went on"
    )
    return Outcome(hung, summary, metrics=result)


def _live_state(live: Any) -> dict[str, Any]:
    """The broker's own figures, read on its event loop."""
    broker = live.server.broker

    def read() -> dict[str, Any]:
        stats = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Broker")[0]
        return {
            "temp_pct": stats["tempPercentUsage"],
            "blocked": stats["blockedProducers"],
            "pending": sum(len(s.pending) + len(s.dispatched) for s in broker.destinations[TOPIC].subs),
            "files": [(f.name, f.referenced, f.current) for f in broker.storehooks.temp_store().files()]
            if broker.temp_usage.peak
            else [],
        }

    return live.call(read)


async def play_on(port: int, read_state: Any) -> dict[str, Any]:
    """On the broker at ``port``: slow subscribers hold messages until the swap; then they drain
    and the producer tries again. ``read_state()`` reads the broker's own figures while the
    producer still waits (or ``{}``)."""
    from clients.stomp import StompClient

    host = "127.0.0.1"
    subs, conns = {}, []
    for name in SUBSCRIBERS:
        c = await StompClient.connect(host, port)
        conns.append(c)
        ack = "client-individual" if name.startswith("slow") else "auto"
        subs[name] = await c.subscribe(TOPIC, id=name, ack=ack, prefetch=int(SLOW_PREFETCH) if ack != "auto" else None)
    producer = await StompClient.connect(host, port)
    conns.append(producer)
    sent = receipted = acked = fast = 0
    stuck = False
    loop = asyncio.get_running_loop()

    # Phase 1: the slow subscribers acknowledge nothing; the producer sends until it is held.
    for i in range(BURST):
        sent += 1
        try:
            await producer.send(TOPIC, BODY, {"seq": str(i)}, receipt=True, timeout=0.5)
            receipted += 1
        except TimeoutError:
            break
    # Phase 2: everybody drains (the producer's last SEND still waits).
    for name, sub in subs.items():
        c = conns[SUBSCRIBERS.index(name)]
        while True:
            try:
                m = await sub.get(timeout=0.3)
            except TimeoutError:
                break
            if name.startswith("slow"):
                await c.ack(m)
                acked += 1
            else:
                fast += 1
    # Phase 3: one more SEND, with nothing pending anywhere.
    started = loop.time()
    sent += 1
    try:
        await producer.send(TOPIC, BODY, {"seq": "after"}, receipt=True, timeout=LIVE_HANG)
        # a connection's RECEIPTs come in order: this one means the SEND phase 1 stopped
        # waiting for (held by flow control, not lost) was receipted too
        receipted = sent
    except TimeoutError:
        stuck = True
    waited = loop.time() - started
    state = read_state()  # before the clients leave: a closed producer is no longer blocked
    for c in conns:
        c.close()
    return {
        "sent": sent,
        "receipted": receipted,
        "acked": acked,
        "fast": fast,
        "stuck": stuck,
        "waited": round(waited, 1),
        "state": state,
    }
