"""The shared-connection deadlock: one connection that consumes and publishes, stopped by flow control.

``run(lab)`` plays one workload on the virtual clock in every run; the runs
differ in the worker's connections and in the broker configuration:

- a *feeder* sends 3000 non-persistent 1000-byte requests to
  ``/queue/requests`` as fast as it is let (at most 500 a second, no RECEIPT:
  an asynchronous send);
- a *worker* consumes them (client-individual, ActiveMQ's default prefetch of
  1000) and handles 200 a second: for each it sends a reply to
  ``/queue/replies`` and then ACKs the request; like a real synchronous client
  it does nothing else while a write of its own is stuck in the socket;
- an *auditor* consumes the replies at once (auto acknowledge);
- the broker has 256 KB of memory for messages.

Runs: ``shared-connection`` (the worker sends and ACKs on one connection),
``separate-connections`` (the cure: one to consume, one to send), and the two
broker-side cures on the shared connection, ``send-fail-if-no-space`` (the
refused reply is an ERROR the worker sends again later) and
``destination-limit`` (the requests queue's own memory limit).

Pathology: the worker's connection is blocked for good while it holds
unacknowledged requests: its next ACK waits, unread, behind the blocked SEND,
and the memory only that ACK would free is what blocks the SEND.
``run_live(lab)`` plays the same with real sockets; ``run_activemq(lab,
broker)`` against ActiveMQ (``lab run 05 --against activemq``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from typing import Any

from clients.labs import LabRun, Outcome
from minibroker.ops import statistics_replies

REQUESTS, REPLIES = "/queue/requests", "/queue/replies"
BODY = "x" * 1000
TOTAL = 3000
SECONDS = 30.0
FEED_PERIOD, FEED_BATCH = 0.01, 5  # at most 500 requests a second
WORK_PERIOD, WORK_BATCH = 0.01, 2  # the worker handles 200 a second
RETRY_AFTER = 0.05  # send-fail-if-no-space: a refused reply is sent again this much later
STUCK_AFTER = 5.0  # no request handled for this long, with some left: the worker is stuck
KB = 1024


class Worker:
    """Consumes requests, sends a reply for each, then ACKs it; blocked while a write of
    its own waits in a socket the broker no longer reads (a synchronous client's thread)."""

    def __init__(self, net: Any, *, shared: bool, receipts: bool) -> None:
        self.net = net
        self.consumer = net.connected_client("worker")
        self.producer = self.consumer if shared else net.connected_client("worker-out")
        self.consumer.subscribe(REQUESTS, "requests", "client-individual")
        self.receipts = receipts
        self.handled = 0  # requests acknowledged (each replied to, or its reply owed)
        self.refused = 0  # replies the broker answered with an ERROR (send-fail-if-no-space)
        self.retry_at = 0.0
        self.owed: deque[int] = deque()  # replies the broker refused, to send again
        self.last_handled_at = 0.0
        self._errors = 0
        self.messages: list[Any] = []  # the requests received, in order
        self._seen: dict[Any, int] = {}  # client -> frames looked at

    def stuck_in_write(self) -> bool:
        return bool(self.producer.outbound or self.consumer.outbound)

    def _reply(self, n: int) -> bool:
        """The reply to request ``n``; False when the broker refused it."""
        headers = {"request": str(n)}
        if self.receipts:
            headers["receipt"] = f"reply-{n}-{self.refused}"
        self.producer.send(REPLIES, BODY, **headers)
        errors = self._errors
        self._read()
        return self._errors == errors

    def _read(self) -> None:
        """Take in the frames received since the last look (only those: a run receives thousands)."""
        for client in {self.consumer, self.producer}:
            frames = client.received
            seen = self._seen.get(client, 0)
            for f in frames[seen:]:
                if f.command == "MESSAGE" and client is self.consumer:
                    self.messages.append(f)
                elif f.command == "ERROR" and client is self.producer:
                    self._errors += 1
                    self.refused += 1
            self._seen[client] = len(frames)

    def tick(self) -> None:
        now = self.net.now
        if self.stuck_in_write():
            return
        while self.owed and now >= self.retry_at:  # replies refused earlier, in order
            if not self._reply(self.owed[0]):
                self.retry_at = now + RETRY_AFTER
                break
            self.owed.popleft()
        self._read()
        for message in self.messages[self.handled : self.handled + WORK_BATCH]:
            n = self.handled
            if self.owed or not self._reply(n):
                # the broker said no at once: keep the reply to send later, and ACK the request
                self.owed.append(n)
                self.retry_at = max(self.retry_at, now + RETRY_AFTER)
            self.consumer.ack(message)
            self.handled += 1
            self.last_handled_at = now
            if self.stuck_in_write():
                return

    @property
    def replied(self) -> int:
        return self.handled - len(self.owed)


class Feeder:
    """Sends TOTAL requests without RECEIPTs, stopping while its own write is stuck."""

    def __init__(self, net: Any) -> None:
        self.client = net.connected_client("feeder")
        self.sent = 0

    def tick(self) -> None:
        for _ in range(FEED_BATCH):
            if self.sent >= TOTAL or self.client.outbound:
                return
            self.client.send(REQUESTS, BODY, seq=str(self.sent))
            self.sent += 1


def run(lab: LabRun) -> Outcome:
    net = lab.network()
    auditor = net.connected_client("auditor")
    auditor.subscribe(REPLIES, "replies")
    worker = Worker(net, shared=lab.name != "separate-connections", receipts=_refusing(lab))
    feeder = Feeder(net)
    net.every(FEED_PERIOD, feeder.tick, until=SECONDS)
    net.every(WORK_PERIOD, worker.tick, until=SECONDS)
    cfg = lab.config
    own = cfg.policy_for("queue", "requests").memory_limit
    lab.note(
        f"workload: feeder {TOTAL} requests of 1000 bytes at most {FEED_BATCH / FEED_PERIOD:.0f}/s to {REQUESTS}; "
        f"worker {WORK_BATCH / WORK_PERIOD:.0f}/s (client-individual, prefetch 1000): a reply to {REPLIES}, then the "
        f"ACK, {'on one connection' if worker.producer is worker.consumer else 'on two connections'}; broker memory "
        f"{cfg.system_usage.memory_limit // KB} KB"
        + (f", {REQUESTS}'s own limit {own // KB} KB" if own else "")
        + (
            ", send_fail_if_no_space on /queue/replies"
            if cfg.policy_for("queue", "replies").send_fail_if_no_space
            else ""
        )
    )
    net.advance(SECONDS)
    return _verdict(lab, net, worker, feeder, len(auditor.messages()))


def _open_block(lab: LabRun, tag: str) -> dict[str, Any] | None:
    """The session's last flow_block, if no flow_unblock followed it."""
    flow = [e for e in lab.trace.events("flow_block", "flow_unblock") if e["session"] == tag]
    return flow[-1] if flow and flow[-1]["event"] == "flow_block" else None


def _verdict(lab: LabRun, net: Any, worker: Worker, feeder: Feeder, replies: int) -> Outcome:
    broker = net.broker
    requests = broker.destinations[REQUESTS]
    held = sum(len(s.dispatched) for s in requests.subscriptions if s.session.tag == worker.consumer.tag)
    block = _open_block(lab, worker.producer.tag)
    waiting_acks = worker.consumer.outbound.count(b"ACK\n")
    blocks = [e for e in lab.trace.events("flow_block") if e["session"] == worker.producer.tag]
    if block is not None:
        lab.note(
            f"t={block['ts']:.2f} s: broker memory full; the worker's SEND to {block['dest']} was held (flow_block, "
            f"usage {block['usage']}) and the broker stopped reading the worker's connection; no flow_unblock followed"
        )
        lab.note(
            f"the worker holds {held} request(s) delivered and unacknowledged; its next ACK waits unread in the "
            f"socket behind the held SEND ({waiting_acks} ACK frame(s) written, not read)"
        )
    else:
        lab.note(f"trace: {len(blocks)} flow_block(s) of the worker's sending connection, each released")
    if worker.refused:
        lab.note(
            f"{worker.refused} reply SEND(s) answered with an ERROR at once; the worker ACKed the request anyway "
            f"and sent the reply again {RETRY_AFTER * 1000:.0f} ms later"
        )
    stats = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Broker")[0]
    lab.note(
        f"after {SECONDS:.0f} s: feeder sent {feeder.sent} of {TOTAL}; worker handled {worker.handled} "
        f"(the last at t={worker.last_handled_at:.2f} s); auditor received {replies} replies; "
        f"minibroker stat: memoryPercentUsage {stats['memoryPercentUsage']}, blockedProducers {stats['blockedProducers']}"
    )
    done = worker.handled == TOTAL and replies == TOTAL
    if block is not None and held:
        summary = (
            f"deadlock: the worker's connection blocked for {SECONDS - block['ts']:.0f} s holding {held} "
            f"unacknowledged request(s); {worker.handled} of {TOTAL} handled"
        )
    elif done:
        summary = f"all {TOTAL} requests handled and replied to, the last at t={worker.last_handled_at:.1f} s"
    else:
        summary = f"{worker.handled} of {TOTAL} requests handled, {replies} replies delivered"
    metrics = {
        "handled": worker.handled,
        "replies": replies,
        "fed": feeder.sent,
        "held_unacked": held,
        "worker_blocks": len(blocks),
        "refused": worker.refused,
        "mem_pct": stats["memoryPercentUsage"],
        "blocked_producers": stats["blockedProducers"],
    }
    return Outcome(not done, summary, metrics=metrics)


# ---------------------------------------------------------------------- live
LIVE_TOTAL = 600
LIVE_WORK = 0.002  # the worker's handling time per request, seconds
LIVE_STALL = 1.5  # no request handled for this long, with some left: stuck
LIVE_DEADLINE = 15.0


def run_live(lab: LabRun) -> Outcome:
    """The same workload on the real server, with real sockets; the broker's own figures
    (who is blocked, what the worker holds) read while the clients still wait."""
    with lab.live_broker() as live:
        result = asyncio.run(play_on(live.port, lambda tags: _live_state(live, tags), lab.name, _refusing(lab)))
    return _live_verdict(lab, result)


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The live run against ActiveMQ: the same clients; the verdict from what they saw."""
    result = asyncio.run(play_on(broker.port, lambda tags: {}, lab.name, _refusing(lab)))
    return _live_verdict(lab, result)


# ---------------------------------------------------------------------- RabbitMQ
#: Requests on RabbitMQ: its node's memory moves by a few MB on its own, the workload must move it
#: more (each 1000-byte request costs the node about 3 KB while it is queued or unacknowledged).
RABBITMQ_TOTAL = 3000
#: The run's end at the latest: while the memory alarm comes and goes, a worker that sends
#: on a connection of its own goes on in spurts.
RABBITMQ_DEADLINE = 40.0
#: The memory alarm's threshold, above the node's own use before the workload.
RABBITMQ_MARGIN = 6 * 2**20


def rabbitmq_settings(config: Any) -> dict[str, str]:
    """The node's rabbitmq.conf for this lab: the memory checked every 100 ms (its default is
    2.5 s), queues that page their messages to disk only just before the alarm (paging starts at
    half the watermark by default, below the node's own use once the watermark is moved within
    the workload's reach; 0.99 is the most its configuration accepts), connection states in the management API within half a second."""
    return {
        "memory_monitor_interval": "100",
        "vm_memory_calculation_strategy": "erlang",
        "vm_memory_high_watermark_paging_ratio": "0.99",
        "collect_statistics_interval": "500",
    }


def run_rabbitmq(lab: LabRun, node: Any) -> Outcome:
    """The live run against a RabbitMQ node with the same clients and RABBITMQ_TOTAL requests.

    RabbitMQ's form of the flow control is its memory alarm: above ``vm_memory_high_watermark``
    it blocks every connection that publishes, and a blocked connection is not read at all (its
    ACKs with it). The watermark is moved within the workload's reach first: the node's memory
    use now plus RABBITMQ_MARGIN; the verdict by the live run's rule."""
    used = max(_sampled(node.memory_used) for _ in range(3))
    node.set_memory_high_watermark(used + RABBITMQ_MARGIN)
    lab.note(
        f"RabbitMQ's memory alarm moved within the workload's reach: vm_memory_high_watermark "
        f"{(used + RABBITMQ_MARGIN) / 2**20:.1f} MB (the node uses {used / 2**20:.1f} MB before the workload; "
        f"{RABBITMQ_TOTAL} requests of {len(BODY)} bytes, about 3 KB each in the node)"
    )

    def connections(tags: list[str]) -> dict[str, Any]:
        listed = node.api("connections")
        return {"states": sorted(str(c.get("state")) for c in listed) if isinstance(listed, list) else []}

    result = asyncio.run(play_on(node.port, connections, lab.name, total=RABBITMQ_TOTAL, deadline=RABBITMQ_DEADLINE))
    for line in node.log("memory resource limit alarm set")[:1]:
        lab.note(f"RabbitMQ's log: {line.split('] ', 1)[-1].strip()}")
    for line in node.log("memory resource limit alarm cleared")[-1:]:
        lab.note(f"RabbitMQ's log, last: {line.split('] ', 1)[-1].strip()}")
    states = result["state"].get("states", [])
    if states:
        blocked = sum(s == "blocked" for s in states)
        lab.note(f"RabbitMQ's connections then: {len(states)}, {blocked} blocked ({', '.join(states)})")
    return _live_verdict(lab, result)


def _sampled(read: Any) -> int:
    time.sleep(0.2)
    return int(read())


def _live_state(live: Any, tags: list[str]) -> dict[str, Any]:
    broker = live.server.broker

    def read() -> dict[str, Any]:
        stats = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Broker")[0]
        requests = broker.destinations.get(REQUESTS)
        held = sum(len(s.dispatched) for s in (requests.subscriptions if requests else []) if s.session.tag in tags)
        return {"mem_pct": stats["memoryPercentUsage"], "blocked": stats["blockedProducers"], "held": held}

    return live.call(read)


def _refusing(lab: LabRun) -> bool:
    """Does the broker answer a reply it has no room for with an ERROR (the worker then asks for RECEIPTs)?"""
    return lab.config.policy_for("queue", "replies").send_fail_if_no_space


async def play_on(
    port: int,
    read_state: Any,
    name: str,
    receipts: bool = False,
    total: int = LIVE_TOTAL,
    deadline: float = LIVE_DEADLINE,
) -> dict[str, Any]:
    """Feeder, worker and auditor as on the virtual clock, as run ``name`` has them, on the
    broker at ``port``, with ``total`` requests; ends when every request is handled or the
    worker has handled nothing for LIVE_STALL seconds (at the latest after ``deadline`` s) (``read_state``: the broker's figures
    read then, or ``{}``; ``receipts``: the worker asks a RECEIPT of each reply, on a broker
    that refuses one with an ERROR)."""
    from clients.stomp import StompClient, StompError

    loop = asyncio.get_running_loop()
    connect = lambda: StompClient.connect("127.0.0.1", port)  # noqa: E731
    auditor, feeder, consumer = await connect(), await connect(), await connect()
    producer = consumer if name != "separate-connections" else await connect()
    conns = [auditor, feeder, consumer] + ([producer] if producer is not consumer else [])
    replies = 0

    def replied(_: Any) -> None:
        nonlocal replies
        replies += 1

    await auditor.subscribe(REPLIES, on_message=replied)
    requests = await consumer.subscribe(REQUESTS, ack="client-individual")
    fed = handled = refused = 0
    owed: deque[int] = deque()
    last = loop.time()

    async def feed() -> None:
        nonlocal fed
        for i in range(total):
            await feeder.send(REQUESTS, BODY, {"seq": str(i)}, timeout=None)
            fed += 1

    async def reply(n: int) -> bool:
        nonlocal refused
        try:
            await producer.send(REPLIES, BODY, {"request": str(n)}, receipt=receipts, timeout=None)
            return True
        except StompError:
            refused += 1
            return False

    async def work() -> None:
        nonlocal handled, last
        while handled < total:
            while owed and await reply(owed[0]):
                owed.popleft()
            message = await requests.get()
            if owed or not await reply(handled):
                owed.append(handled)
            await consumer.ack(message)
            handled += 1
            last = loop.time()
            await asyncio.sleep(LIVE_WORK)
        while owed:  # the replies the broker refused, until it takes them
            if not await reply(owed[0]):
                await asyncio.sleep(RETRY_AFTER)
                continue
            owed.popleft()

    feeding, working = asyncio.create_task(feed()), asyncio.create_task(work())
    started = loop.time()
    while not working.done() and loop.time() - last < LIVE_STALL and loop.time() - started < deadline:
        await asyncio.sleep(0.1)
    stuck = not working.done()
    while working.done() and replies < total and loop.time() - started < deadline:
        await asyncio.sleep(0.05)  # the last replies on their way to the auditor
    state = read_state([c.session for c in (consumer,)])
    for task in (feeding, working):
        task.cancel()
    await asyncio.gather(feeding, working, return_exceptions=True)
    for c in conns:
        c.close()
    return {
        "total": total,
        "fed": fed,
        "handled": handled,
        "replies": replies,
        "refused": refused,
        "stuck": stuck,
        "stalled_for": round(loop.time() - last, 1),
        "state": state,
    }


def _live_verdict(lab: LabRun, result: dict[str, Any]) -> Outcome:
    state = result.pop("state")
    total = result.pop("total")
    lab.note(
        f"feeder sent {result['fed']} of {total}; worker handled {result['handled']}, auditor received "
        f"{result['replies']} replies"
        + (f"; {result['refused']} reply SEND(s) refused with an ERROR, sent again" if result["refused"] else "")
    )
    if result["stuck"]:
        lab.note(f"the worker handled nothing for {result['stalled_for']} s with requests left: it is stuck")
    if "mem_pct" in state:
        lab.note(
            f"minibroker stat then: memoryPercentUsage {state['mem_pct']}, blockedProducers {state['blocked']}; "
            f"the worker's connection holds {state['held']} unacknowledged request(s)"
        )
    done = result["handled"] == total and result["replies"] == total
    if done:
        summary = f"all {total} requests handled and replied to"
    elif result["handled"] == total:  # the worker's writes all went out, into a connection no longer read
        summary = (
            f"the worker wrote its {total} replies and ACKs, but only {result['replies']} replies arrived: the "
            "broker stopped reading its connection"
        )
    else:
        summary = f"the worker is stuck after {result['handled']} of {total} requests"
    return Outcome(not done, summary, metrics=result)


# ---------------------------------------------------------------- the student's worker
#: ``lab check 05 --client FILE.py``: requests fed, and how long the worker may take (a slow
#: machine may want more). Its work takes LIVE_WORK a request, as the live run's worker's does.
CLIENT_DEADLINE = float(os.environ.get("MINIBROKER_LAB_CLIENT_DEADLINE", "15"))


def run_client(lab: LabRun, path: Any) -> Outcome:
    """The student's worker (``consume(host, port, queue, count, work, replies)``: for each
    request, ``work(message_id)``, a reply to ``replies``, the request acknowledged) against the
    real server with the run's configuration, while a feeder floods the requests and an auditor
    reads the replies, as in the live run. Graded by the replies the auditor received: the
    deadlock stops them short."""
    from clients.labs.student import run_beside

    seen: dict[str, int] = {"fed": 0, "replies": 0}

    async def feed_and_audit(port: int, stop: threading.Event) -> None:
        from clients.stomp import StompClient

        auditor, feeder = await StompClient.connect("127.0.0.1", port), await StompClient.connect("127.0.0.1", port)

        def replied(_: Any) -> None:
            seen["replies"] += 1

        await auditor.subscribe(REPLIES, on_message=replied)

        async def feed() -> None:
            for i in range(LIVE_TOTAL):
                await feeder.send(REQUESTS, BODY, {"seq": str(i)}, timeout=None)
                seen["fed"] += 1

        feeding = asyncio.create_task(feed())
        while not stop.is_set():
            await asyncio.sleep(0.05)
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)
        for c in (auditor, feeder):
            c.close()

    with lab.live_broker(lab.config) as live:
        run = run_beside(
            lambda stop: feed_and_audit(live.port, stop),
            path,
            live.port,
            REQUESTS,
            LIVE_TOTAL,
            LIVE_WORK,
            CLIENT_DEADLINE,
            extra={"replies": REPLIES},
            settled=lambda: seen["replies"] >= LIVE_TOTAL,  # the last replies on their way to the auditor
        )
    fed, replies = seen["fed"], seen["replies"]
    lab.note(run.story(LIVE_TOTAL, CLIENT_DEADLINE))
    lab.note(f"the feeder sent {fed} of {LIVE_TOTAL} requests; the auditor received {replies} replies")
    stuck = replies < LIVE_TOTAL
    summary = (
        f"the worker is stuck: {replies} replies of {LIVE_TOTAL} requests"
        if stuck
        else f"all {LIVE_TOTAL} requests handled and replied to"
    )
    metrics = {
        "fed": fed,
        "replies": replies,
        "processed_pct": round(100 * len(set(run.processed)) / LIVE_TOTAL),
        "duplicates": run.duplicates,
    }
    return Outcome(stuck, summary, metrics=metrics)
