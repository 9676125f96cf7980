"""The destination-limits trap: starving consumers when no destination has a memory limit.

``run(lab)`` plays one of two workloads on the virtual clock, chosen by the
run's name:

- ``restart-*`` (symptom 1): 50 persistent messages wait on queue A with no
  consumer; the broker restarts (A's messages stay in the store); a producer
  fills one consumer-less queue B.1 (``two-backlogs``: B.1 and B.2) with
  persistent messages; then a consumer subscribes to A and waits 10 s.
  Pathology: A's consumer receives nothing while A's messages sit in the store.
- ``slow-*`` (symptom 2): two queues S.1 and S.2 hold 900 messages each for
  consumers that prefetch 800 and ack one message every 0.5 s; queue F
  receives 50 msg/s and has a fast consumer. Pathology: over 40 s F's
  consumer gets less than half of what was sent to F.

``run_live(lab)`` plays the same workloads against the real server
(``lab.live_broker()``, restarted on its data directory for symptom 1) with
the asyncio client ``clients.stomp.StompClient``, in a few seconds of real
time: A's consumer waits 3 s, F is fed for 3 s (and read for 1 s more). The
verdicts use the same evidence, read from the live broker on its own thread.

``run_activemq(lab, broker)`` plays the live workloads against ActiveMQ
(``lab run 00 --against activemq``) with the same clients and the same
verdict rules, from what the clients see: ActiveMQ 5.15 and later have only
the current space check, so ``restart-legacy`` does not starve there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from clients.labs import LabRun, Outcome
from clients.stomp import StompClient, Subscription

BODY = "x" * 1000
A_MESSAGES = 50
B_MESSAGES = 1800  # about 3.6 MB per backlog: more than the 70% mark of the 4 MB broker memory
S_MESSAGES, S_PREFETCH = 900, 800
F_PERIOD, ACK_PERIOD = 0.02, 0.5  # F gets 50 msg/s; each slow consumer acks one message every 0.5 s


def run(lab: LabRun) -> Outcome:
    if lab.name.startswith("restart"):
        return restart_symptom(lab, backlogs(lab))
    return slow_symptom(lab)


def run_live(lab: LabRun) -> Outcome:
    """The same run against the real server with real sockets."""
    if lab.name.startswith("restart"):
        return restart_live(lab, backlogs(lab))
    return slow_live(lab)


def backlogs(lab: LabRun) -> int:
    return 2 if ("two-backlogs" in lab.name or "cure" in lab.name) else 1


def b_queues(count: int) -> list[str]:
    return [f"B.{b}" for b in range(1, count + 1)]


# -- evidence, the same for the virtual and the live runs (read on the broker's thread) ----


def note_backlogs(lab: LabRun, broker: Any, count: int) -> None:
    for name in b_queues(count):
        q = broker.destinations[f"/queue/{name}"]
        lab.note(
            f"/queue/{name}: {q.size()} messages, no consumer, memory {q.memory.usage // 1024} KB "
            f"({q.memory.usage * 100 // broker.memory.limit}% of the broker's), {q.cursor_statistics()['storeOnlyCount']} store-only"
        )


def blocked_sends(broker: Any) -> int:
    """SENDs held by producer flow control right now (the statistics' blockedProducers)."""
    return sum(len(s.producing.parked) for s in broker.sessions.values())


def dispatched(broker: Any, addresses: list[str]) -> list[int]:
    """Delivered-but-unacknowledged messages of the subscriptions to each address."""
    subs = [sub for session in broker.sessions.values() for sub in session.subscriptions.values()]
    return [sum(len(sub.dispatched) for sub in subs if sub.destination.address == a) for a in addresses]


def note_flow_control(lab: LabRun, broker: Any) -> None:
    held = blocked_sends(broker)
    if held:
        lab.note(
            f"producer flow control holds the producer's next send ({held} held; broker memory "
            f"{broker.memory.percent}%): the backlog stops growing there"
        )


def page_ins_blocked(lab: LabRun, dest: str) -> list[dict[str, Any]]:
    """The trace's page_in_blocked events for ``dest`` (none in a live run: it keeps no trace)."""
    return [e for e in (lab.trace.events("page_in_blocked") if lab.trace else []) if e.get("dest") == dest]


def restart_outcome(lab: LabRun, broker: Any, received: int, seconds: float) -> Outcome:
    a = broker.destinations["/queue/A"]
    stats = a.cursor_statistics()
    lab.note(
        f"consumer on /queue/A received {received} of {A_MESSAGES} in {seconds:.0f} s; A: memory {a.memory.percent}% "
        f"of its limit, {stats['storeOnlyCount']} store-only, broker memory {broker.memory.percent}%"
    )
    blocked = page_ins_blocked(lab, "/queue/A")
    if blocked:
        lab.note(
            f"trace: page_in_blocked on /queue/A at t={blocked[0]['ts']:.1f}s (broker memory {blocked[0].get('mem_pct')}%)"
        )
    for finding in broker.diagnose():
        lab.note(f"broker diagnosis: {finding['summary']}; cure: {finding['cure']}")
    starved = received == 0 and stats["storeOnlyCount"] > 0
    summary = (
        f"A's consumer starved: 0 of {A_MESSAGES} received while the broker's memory is at {broker.memory.percent}%"
        if starved
        else f"A's consumer received {received} of {A_MESSAGES}"
    )
    return Outcome(
        starved,
        summary,
        metrics={
            "received": received,
            "broker_memory_pct": broker.memory.percent,
            "a_store_only": stats["storeOnlyCount"],
        },
    )


def note_slow_setup(lab: LabRun, broker: Any) -> None:
    lab.note(
        f"/queue/S.1 and /queue/S.2: {S_MESSAGES} messages each, slow consumers (prefetch {S_PREFETCH}, one ack "
        f"per {ACK_PERIOD} s); broker memory {broker.memory.percent}%"
    )


def slow_verdict(share: float) -> tuple[bool, str]:
    """Symptom 2's rule, on every broker: F's consumer got less than half of what F was sent."""
    if share < 0.5:
        return True, f"the fast consumer got only {share:.0%} of F's messages: held to the slow consumers' pace"
    return False, f"the fast consumer kept up ({share:.0%} of F's messages)"


def slow_outcome(lab: LabRun, broker: Any, sent: int, received: int, acked: dict[str, int], seconds: float) -> Outcome:
    share = received / max(1, sent)
    f = broker.destinations["/queue/F"]
    lab.note(
        f"/queue/F: {sent} sent at {1 / F_PERIOD:.0f} msg/s, the fast consumer received {received} ({share:.0%}) "
        f"in {seconds:.0f} s; {f.cursor_statistics()['storeOnlyCount']} still in the store"
    )
    for name, count in acked.items():
        q = broker.destinations[f"/queue/{name}"]
        lab.note(
            f"/queue/{name}: slow consumer acked {count}; the queue holds {q.memory.usage // 1024} KB "
            f"({q.memory.usage * 100 // broker.memory.limit}% of the broker's memory)"
        )
    if lab.trace is not None:
        lab.note(
            f"trace: {len(page_ins_blocked(lab, '/queue/F'))} page_in_blocked event(s) on /queue/F; "
            f"broker memory now {broker.memory.percent}%"
        )
    slowed, summary = slow_verdict(share)
    return Outcome(
        slowed, summary, metrics={"sent_f": sent, "received_f": received, "broker_memory_pct": broker.memory.percent}
    )


# -- the virtual clock -------------------------------------------------------------------


def restart_symptom(lab: LabRun, count: int, seconds: float = 10.0) -> Outcome:
    net = lab.network()
    producer = net.connected_client("producer")
    for i in range(A_MESSAGES):
        producer.send("/queue/A", f"a{i}", persistent="true")
    lab.note(f"{A_MESSAGES} persistent messages sent to /queue/A, which has no consumer; then the broker restarts")
    net.restart()
    producer = net.connected_client("producer-b")
    for name in b_queues(count):
        for i in range(B_MESSAGES):
            producer.send(f"/queue/{name}", BODY, persistent="true", receipt=f"{name}-{i}")
    note_backlogs(lab, net.broker, count)
    note_flow_control(lab, net.broker)
    consumer = net.connected_client("consumer-a")
    consumer.subscribe("/queue/A")
    net.advance(seconds)
    return restart_outcome(lab, net.broker, len(consumer.messages()), seconds)


def slow_symptom(lab: LabRun, seconds: float = 40.0) -> Outcome:
    net = lab.network()
    producer = net.connected_client("producers")
    # Slow queues with a backlog: their consumers prefetch 800 each (client ack)
    # and ack one message every 0.5 s, so what they hold stays in memory.
    for name in ("S.1", "S.2"):
        for _ in range(S_MESSAGES):
            producer.send(f"/queue/{name}", BODY, persistent="true")
    slow = {}
    for name in ("S.1", "S.2"):
        c = net.connected_client(f"slow-{name}")
        c.subscribe(f"/queue/{name}", "s", "client-individual", **{"activemq.prefetchSize": str(S_PREFETCH)})
        slow[name] = c
    note_slow_setup(lab, net.broker)
    fast = net.connected_client("fast")
    fast.subscribe("/queue/F")
    sent = {"F": 0}

    def produce() -> None:
        producer.send("/queue/F", BODY, persistent="true")
        sent["F"] += 1

    acked = {name: 0 for name in slow}

    def slow_ack() -> None:
        for name, c in slow.items():
            unacked = c.messages()[acked[name] :]
            if unacked:
                c.ack(unacked[0])
                acked[name] += 1

    net.every(F_PERIOD, produce, until=seconds)
    net.every(ACK_PERIOD, slow_ack, until=seconds)
    net.advance(seconds)
    return slow_outcome(lab, net.broker, sent["F"], len(fast.messages()), acked, seconds)


# -- the real server, real sockets, our asyncio client -------------------------------------


async def _send_all(client: StompClient, destination: str, count: int, body: str) -> None:
    """``count`` persistent messages; a RECEIPT for the last one (so all are journaled)."""
    for i in range(count):
        await client.send(destination, body, {"persistent": "true"}, receipt=i == count - 1)


async def _until(condition: Any, timeout: float = 20.0) -> None:
    """Poll ``condition()`` every 20 ms until it holds; TimeoutError after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(f"the live broker did not get there in {timeout:.0f} s")
        await asyncio.sleep(0.02)


async def _collect(sub: Subscription, most: int, seconds: float) -> int:
    """Messages taken from ``sub`` in ``seconds`` (stops early at ``most``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    got = 0
    while got < most:
        try:
            await sub.get(timeout=max(0.0, deadline - loop.time()))
        except TimeoutError:
            break
        got += 1
    return got


def restart_live(lab: LabRun, count: int, seconds: float = 3.0) -> Outcome:
    with lab.live_broker() as live:

        async def before_restart() -> None:
            async with await StompClient.connect(port=live.port) as producer:
                await _send_all(producer, "/queue/A", A_MESSAGES, "a")

        async def after_restart() -> Outcome:
            producer = await StompClient.connect(port=live.port)

            async def fill() -> None:
                for name in b_queues(count):
                    await _send_all(producer, f"/queue/{name}", B_MESSAGES, BODY)

            filling = asyncio.create_task(fill())
            try:
                # Until every backlog message is in, or producer flow control holds the producer
                # (two backlogs under the current space check fill the broker to 100%).
                await _until(lambda: filling.done() or live.call(lambda: blocked_sends(live.server.broker)) > 0)
                if filling.done():
                    filling.result()
                live.call(
                    lambda: (note_backlogs(lab, live.server.broker, count), note_flow_control(lab, live.server.broker))
                )
                async with await StompClient.connect(port=live.port) as consumer:
                    received = await _collect(await consumer.subscribe("/queue/A"), A_MESSAGES, seconds)
                    return live.call(lambda: restart_outcome(lab, live.server.broker, received, seconds))
            finally:
                filling.cancel()
                producer.close()

        asyncio.run(before_restart())
        lab.note(
            f"{A_MESSAGES} persistent messages sent to /queue/A, which has no consumer; then the real server "
            "restarts on the same data directory"
        )
        live.restart()
        return asyncio.run(after_restart())


async def _slow_workload(
    port: int, settle: Callable[[dict[str, Subscription]], Awaitable[None]], seconds: float, grace: float
) -> tuple[int, int, dict[str, int]]:
    """Symptom 2 with our client against the broker on ``port``: the slow queues' backlogs
    and consumers, ``settle`` (until the broker has dispatched what they prefetch), then F
    fed for ``seconds`` and read ``grace`` s more. Returns (sent to F, F received, acked)."""
    clients: list[StompClient] = []

    async def connect() -> StompClient:
        clients.append(await StompClient.connect(port=port))
        return clients[-1]

    try:
        producer = await connect()
        slow: dict[str, tuple[StompClient, Subscription]] = {}
        for name in ("S.1", "S.2"):
            await _send_all(producer, f"/queue/{name}", S_MESSAGES, BODY)
        for name in ("S.1", "S.2"):
            c = await connect()
            slow[name] = (c, await c.subscribe(f"/queue/{name}", ack="client-individual", prefetch=S_PREFETCH))
        await settle({name: sub for name, (_, sub) in slow.items()})
        received = 0

        def count(_message: Any) -> None:
            nonlocal received
            received += 1

        await (await connect()).subscribe("/queue/F", on_message=count)
        acked = {name: 0 for name in slow}

        async def slow_acks() -> None:
            while True:
                await asyncio.sleep(ACK_PERIOD)
                for name, (c, sub) in slow.items():
                    message = sub.get_nowait()
                    if message is not None:
                        await c.ack(message)
                        acked[name] += 1

        acker = asyncio.create_task(slow_acks())
        loop = asyncio.get_running_loop()
        sent = 0
        start = loop.time()
        while loop.time() - start < seconds:
            await producer.send("/queue/F", BODY, {"persistent": "true"})
            sent += 1
            await asyncio.sleep(max(0.0, start + sent * F_PERIOD - loop.time()))
        await asyncio.sleep(grace)  # let the last messages reach the fast consumer
        acker.cancel()
        return sent, received, acked
    finally:
        for c in clients:
            c.close()


def slow_live(lab: LabRun, seconds: float = 3.0, grace: float = 1.0) -> Outcome:
    with lab.live_broker() as live:

        async def settle(slow: dict[str, Subscription]) -> None:
            previous: list[int] = []
            streak = 0

            def settled() -> bool:
                """Each slow consumer holds what the broker dispatched to it, three polls in a row."""
                nonlocal previous, streak
                mine = [sub.pending for sub in slow.values()]
                theirs = live.call(lambda: dispatched(live.server.broker, ["/queue/S.1", "/queue/S.2"]))
                streak = streak + 1 if mine == theirs == previous else 0
                previous = mine
                return streak >= 2

            await _until(settled)
            live.call(lambda: note_slow_setup(lab, live.server.broker))

        sent, received, acked = asyncio.run(_slow_workload(live.port, settle, seconds, grace))
        return live.call(lambda: slow_outcome(lab, live.server.broker, sent, received, acked, seconds + grace))


# -- ActiveMQ, the same clients (``lab run 00 --against activemq``) -------------------------


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The live workloads against ActiveMQ (``broker``: ``clients.labs.against.ActiveMQBroker``).
    The same clients and the same verdict rules; the evidence is what the clients saw."""
    if lab.name.startswith("restart"):
        return restart_activemq(lab, broker, backlogs(lab))
    return slow_activemq(lab, broker)


async def _fill(client: StompClient, destinations: list[str], written: list[int], held_after: float) -> bool:
    """Each destination's backlog, a RECEIPT for its last message; False when the broker stopped
    taking them (no RECEIPT, nothing more written, for ``held_after`` s: producer flow control)."""

    async def send() -> None:
        for destination in destinations:
            for i in range(B_MESSAGES):
                await client.send(destination, BODY, {"persistent": "true"}, receipt=i == B_MESSAGES - 1)
                written[0] += 1

    task = asyncio.create_task(send())
    last, still = -1, 0.0
    while not task.done():
        await asyncio.sleep(0.1)
        still = still + 0.1 if written[0] == last else 0.0
        last = written[0]
        if still >= held_after:
            task.cancel()
            return False
    task.result()
    return True


def restart_activemq(lab: LabRun, broker: Any, count: int, seconds: float = 3.0) -> Outcome:
    async def before_restart() -> None:
        async with await StompClient.connect(port=broker.port) as producer:
            await _send_all(producer, "/queue/A", A_MESSAGES, "a")

    async def after_restart() -> Outcome:
        producer = await StompClient.connect(port=broker.port)
        written = [0]
        try:
            done = await _fill(producer, [f"/queue/{n}" for n in b_queues(count)], written, held_after=2.0)
        finally:
            producer.close()
        queues = " and ".join(f"/queue/{n}" for n in b_queues(count))
        if done:
            lab.note(f"{queues}: {written[0]} persistent messages, no consumer, all receipted")
        else:
            lab.note(
                f"{queues}: the producer is held after {written[0]} of {count * B_MESSAGES} messages "
                "(ActiveMQ stopped reading them: producer flow control)"
            )
        for line in broker.log("Memory Limit reached")[:1]:
            lab.note(f"ActiveMQ's log: {line.split(' | ')[2] if line.count(' | ') >= 2 else line}")
        async with await StompClient.connect(port=broker.port) as consumer:
            received = await _collect(await consumer.subscribe("/queue/A"), A_MESSAGES, seconds)
        lab.note(f"consumer on /queue/A received {received} of {A_MESSAGES} in {seconds:.0f} s")
        starved = received == 0
        summary = (
            f"A's consumer starved: 0 of {A_MESSAGES} received"
            if starved
            else f"A's consumer received {received} of {A_MESSAGES}"
        )
        return Outcome(starved, summary, metrics={"received": received, "backlog_written": written[0]})

    asyncio.run(before_restart())
    lab.note(
        f"{A_MESSAGES} persistent messages sent to /queue/A, which has no consumer; then ActiveMQ restarts on its data"
    )
    broker.restart()
    return asyncio.run(after_restart())


def slow_activemq(lab: LabRun, broker: Any, seconds: float = 3.0, grace: float = 1.0) -> Outcome:
    async def settle(slow: dict[str, Subscription]) -> None:
        loop = asyncio.get_running_loop()
        previous: list[int] = []
        since = loop.time()

        def settled() -> bool:
            """What the slow consumers hold has not changed for half a second."""
            nonlocal previous, since
            mine = [sub.pending for sub in slow.values()]
            if mine != previous:
                previous, since = mine, loop.time()
            return loop.time() - since >= 0.5

        await _until(settled)
        lab.note(
            f"/queue/S.1 and /queue/S.2: {S_MESSAGES} messages each, slow consumers (prefetch {S_PREFETCH}, one "
            f"ack per {ACK_PERIOD} s) hold {' and '.join(str(n) for n in previous)}"
        )

    sent, received, acked = asyncio.run(_slow_workload(broker.port, settle, seconds, grace))
    share = received / max(1, sent)
    lab.note(
        f"/queue/F: {sent} sent at {1 / F_PERIOD:.0f} msg/s, the fast consumer received {received} ({share:.0%}) "
        f"in {seconds + grace:.0f} s; the slow consumers acked " + ", ".join(f"{n} {k}" for k, n in acked.items())
    )
    slowed, summary = slow_verdict(share)
    return Outcome(slowed, summary, metrics={"sent_f": sent, "received_f": received})
