"""Seed 000: starving consumers when no destination has a memory limit.

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
"""
from __future__ import annotations

from typing import Any

from clients.labs import LabRun, Outcome

BODY = "x" * 1000


def run(lab: LabRun) -> Outcome:
    if lab.name.startswith("restart"):
        return restart_symptom(lab, backlogs=2 if ("two-backlogs" in lab.name or "cure" in lab.name) else 1)
    return slow_symptom(lab)


def restart_symptom(lab: LabRun, backlogs: int) -> Outcome:
    net = lab.network()
    producer = net.connected_client("producer")
    for i in range(50):
        producer.send("/queue/A", f"a{i}", persistent="true")
    lab.note("50 persistent messages sent to /queue/A, which has no consumer; then the broker restarts")
    net.restart()
    producer = net.connected_client("producer-b")
    for b in range(1, backlogs + 1):
        for i in range(1800):  # about 3.6 MB: more than the 70% mark of the 4 MB broker memory
            producer.send(f"/queue/B.{b}", BODY, persistent="true", receipt=f"b{b}-{i}")
    broker = net.broker
    queues = {name: broker.destinations[f"/queue/{name}"] for name in ["A", *[f"B.{b}" for b in range(1, backlogs + 1)]]}
    for name, q in queues.items():
        if name != "A":
            lab.note(f"/queue/{name}: {q.size()} messages, no consumer, memory {q.memory.usage // 1024} KB "
                     f"({q.memory.usage * 100 // broker.memory.limit}% of the broker's), {q.cursor_statistics()['storeOnlyCount']} store-only")
    consumer = net.connected_client("consumer-a")
    consumer.subscribe("/queue/A")
    net.advance(10.0)
    received = len(consumer.messages())
    a = queues["A"]
    stats = a.cursor_statistics()
    lab.note(f"consumer on /queue/A received {received} of 50 in 10 s; A: memory {a.memory.percent}% of its limit, "
             f"{stats['storeOnlyCount']} store-only, broker memory {broker.memory.percent}%")
    blocked = [e for e in (lab.trace.events("page_in_blocked") if lab.trace else []) if e.get("dest") == "/queue/A"]
    if blocked:
        lab.note(f"trace: page_in_blocked on /queue/A at t={blocked[0]['ts']:.1f}s (broker memory {blocked[0].get('mem_pct')}%)")
    for finding in broker.diagnose():
        lab.note(f"broker diagnosis: {finding['summary']}; cure: {finding['cure']}")
    starved = received == 0 and stats["storeOnlyCount"] > 0
    summary = (f"A's consumer starved: 0 of 50 received while the broker's memory is at {broker.memory.percent}%"
               if starved else f"A's consumer received {received} of 50")
    return Outcome(starved, summary, metrics={"received": received, "broker_memory_pct": broker.memory.percent,
                                              "a_store_only": stats["storeOnlyCount"]})


def slow_symptom(lab: LabRun, seconds: float = 40.0) -> Outcome:
    net = lab.network()
    producer = net.connected_client("producers")
    # Slow queues with a backlog: their consumers prefetch 800 each (client ack)
    # and ack one message every 0.5 s, so what they hold stays in memory.
    for name in ("S.1", "S.2"):
        for _ in range(900):
            producer.send(f"/queue/{name}", BODY, persistent="true")
    slow = {}
    for name in ("S.1", "S.2"):
        c = net.connected_client(f"slow-{name}")
        c.subscribe(f"/queue/{name}", "s", "client-individual", **{"activemq.prefetchSize": "800"})
        slow[name] = c
    broker = net.broker
    lab.note(f"/queue/S.1 and /queue/S.2: 900 messages each, slow consumers (prefetch 800, one ack per 0.5 s); "
             f"broker memory {broker.memory.percent}%")
    fast = net.connected_client("fast")
    fast.subscribe("/queue/F")
    sent = {"F": 0}

    def produce() -> None:
        producer.send("/queue/F", BODY, persistent="true")
        sent["F"] += 1

    acked = {name: 0 for name in slow}

    def slow_ack() -> None:
        for name, c in slow.items():
            unacked = c.messages()[acked[name]:]
            if unacked:
                c.ack(unacked[0])
                acked[name] += 1

    net.every(0.02, produce, until=seconds)
    net.every(0.5, slow_ack, until=seconds)
    net.advance(seconds)
    received = len(fast.messages())
    share = received / max(1, sent["F"])
    f = broker.destinations["/queue/F"]
    lab.note(f"/queue/F: {sent['F']} sent at 50 msg/s, the fast consumer received {received} ({share:.0%}) in {seconds:.0f} s; "
             f"{f.cursor_statistics()['storeOnlyCount']} still in the store")
    for name in slow:
        q = broker.destinations[f"/queue/{name}"]
        lab.note(f"/queue/{name}: slow consumer acked {acked[name]}; the queue holds {q.memory.usage // 1024} KB "
                 f"({q.memory.usage * 100 // broker.memory.limit}% of the broker's memory)")
    blocked = [e for e in (lab.trace.events("page_in_blocked") if lab.trace else []) if e.get("dest") == "/queue/F"]
    lab.note(f"trace: {len(blocked)} page_in_blocked event(s) on /queue/F; broker memory now {broker.memory.percent}%")
    slowed = share < 0.5
    summary = (f"the fast consumer got only {share:.0%} of F's messages: held to the slow consumers' pace"
               if slowed else f"the fast consumer kept up ({share:.0%} of F's messages)")
    return Outcome(slowed, summary, metrics={"sent_f": sent["F"], "received_f": received,
                                             "broker_memory_pct": broker.memory.percent})
