"""A poison message: redelivered in a hot loop, then dead-lettered among everybody's expired messages.

``run(lab)`` plays one workload on the virtual clock in every run; only the
broker configuration differs:

- an order service consumes ``/queue/orders`` (client-individual, the default
  prefetch); it cannot process one message, ``poison``, and NACKs it within
  5 ms of each delivery; every other order it ACKs;
- a shop sends ``poison`` first, then 200 good orders, 20 a second (persistent);
- a price feed sends 50 quotes to ``/queue/prices`` that expire after 2 s;
  nobody reads them;
- the run lasts 40 virtual seconds; then each dead letter queue is read.

Pathology: the poison message is delivered more than ``LOOP_DELIVERIES`` times
within a minute (a redelivery loop, the trace analysis's ``redelivery_loop``),
or it ends in a dead letter queue that also holds other queues' or expired
messages, where nobody can tell it apart. ``run_live(lab)`` plays the same on
the real server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from collections import Counter
from itertools import pairwise
from typing import Any

from clients.labs import LabRun, Outcome
from clients.spark.findings import Params
from minibroker.config import BrokerConfig

ORDERS, PRICES = "/queue/orders", "/queue/prices"
GOOD, QUOTES = 200, 50
ORDER_PERIOD = 0.05  # 20 good orders a second
REACT = 0.005  # the order service answers each delivery within 5 ms
QUOTE_TTL = 2.0  # seconds a quote is worth anything
SECONDS = 40.0
#: More deliveries of one message than this within LOOP_WINDOW seconds is a loop (the detector's rule).
LOOP_DELIVERIES, LOOP_WINDOW = Params().poison_deliveries, Params().poison_window


def most_in_window(times: list[float], window: float) -> int:
    """The most of ``times`` (sorted) inside any ``window`` seconds."""
    best, j = 0, 0
    for i, t in enumerate(times):
        while t - times[j] > window:
            j += 1
        best = max(best, i - j + 1)
    return best


class OrderService:
    """ACKs every order but ``poison``, which it NACKs each time it comes."""

    def __init__(self, client: Any, now: Any) -> None:
        self.client = client
        self.now = now
        self.seen = 0
        self.handled = 0
        self.poison_at: list[float] = []  # when each delivery of the poison message came

    def tick(self) -> None:
        frames = self.client.received  # every frame so far: only the new ones are looked at
        new, self.seen = frames[self.seen :], len(frames)
        for m in new:
            if m.command != "MESSAGE":
                continue
            if m.body == b"poison":
                self.poison_at.append(self.now())
                self.client.nack(m)
            else:
                self.client.ack(m)
                self.handled += 1


def run(lab: LabRun) -> Outcome:
    net = lab.network()
    service = OrderService(net.connected_client("order-service"), lambda: net.now)
    service.client.subscribe(ORDERS, "orders", "client-individual")
    shop, feed = net.connected_client("shop"), net.connected_client("price-feed")
    shop.send(ORDERS, "poison", persistent="true", order="poison")
    for i in range(QUOTES):
        feed.send(PRICES, f"quote {i}", persistent="true", expires=str(int((net.now + QUOTE_TTL) * 1000)))
    sent = 0

    def order() -> None:
        nonlocal sent
        if sent < GOOD:
            shop.send(ORDERS, f"order {sent}", persistent="true", order=str(sent))
            sent += 1

    depths: list[int] = []
    queue = net.broker.destinations[ORDERS]
    net.every(ORDER_PERIOD, order, until=SECONDS)
    net.every(REACT, service.tick, until=SECONDS)
    net.every(1.0, lambda: depths.append(queue.size()), until=SECONDS)
    net.advance(SECONDS)
    dlqs = read_dead_letters(net)
    return verdict(lab, service, sent, depths, dlqs)


def read_dead_letters(net: Any) -> dict[str, list[dict[str, str]]]:
    """Every dead letter queue's messages (their headers), read by one client."""
    reader = net.connected_client("dlq-reader")
    names = sorted(a for a in net.broker.destinations if a.startswith("/queue/ActiveMQ.DLQ"))
    for i, name in enumerate(names):
        reader.subscribe(name, f"d{i}")
    net.advance(0.1)
    out: dict[str, list[dict[str, str]]] = {name: [] for name in names}
    for m in reader.messages():
        out[m.headers["destination"]].append(dict(m.headers) | {"body": m.body.decode()})
    return out


def expired_letter(message: dict[str, str]) -> bool:
    """Was this dead letter dead-lettered because it expired? (minibroker says ``expired``,
    ActiveMQ ``java.lang.Throwable: Message Expired``.)"""
    return "expired" in message.get("dlqDeliveryFailureCause", "").lower()


def describe_dlq(name: str, messages: list[dict[str, str]]) -> str:
    origins = Counter(m.get("original-destination", "?") for m in messages)
    causes = Counter("expired" if expired_letter(m) else "redelivered" for m in messages)
    return (
        f"{name}: {len(messages)} message(s), from "
        + ", ".join(f"{dest} {n}" for dest, n in sorted(origins.items()))
        + " ("
        + ", ".join(f"{cause} {n}" for cause, n in sorted(causes.items()))
        + ")"
    )


def verdict(
    lab: LabRun, service: OrderService, sent: int, depths: list[int], dlqs: dict[str, list[dict[str, str]]]
) -> Outcome:
    times = service.poison_at
    burst = most_in_window(times, LOOP_WINDOW)
    spread = times[-1] - times[0] if len(times) > 1 else 0.0
    lab.note(
        f"the poison message was delivered {len(times)} time(s) in {spread:.3f} s"
        + (f" ({len(times) / spread:.0f} a second)" if spread and len(times) > LOOP_DELIVERIES else "")
        + f"; at most {burst} within {LOOP_WINDOW:.0f} s"
    )
    if len(times) > 1:
        gaps = [round(b - a, 3) for a, b in pairwise(times)]
        shown = gaps if len(gaps) <= 8 else gaps[:4] + ["..."] + gaps[-2:]
        lab.note(f"seconds between its deliveries: {', '.join(map(str, shown))}")
    lab.note(
        f"{service.handled} of {sent} good orders handled"
        + (f"; {ORDERS} held {min(depths)}-{max(depths)} message(s) in the once-a-second samples" if depths else "")
    )
    poison_in = [name for name, ms in dlqs.items() if any(m["body"] == "poison" for m in ms)]
    for name, messages in dlqs.items():
        lab.note(describe_dlq(name, messages))
    if not dlqs:
        lab.note("no dead letter queue was created")
    expired = lab.trace.events("expire") if lab.trace is not None else []
    if expired:
        fate = "dead-lettered" if lab.config.policy_for("queue", "prices").process_expired else "dropped"
        lab.note(f"{len(expired)} quote(s) expired on {PRICES}, unread, and were {fate}")
    loop = burst > LOOP_DELIVERIES
    mixed = [name for name in poison_in if any(m["body"] != "poison" or expired_letter(m) for m in dlqs[name])]
    if loop:
        summary = (
            f"a redelivery loop: the poison message delivered {len(times)} times in {spread:.1f} s and still on "
            f"{ORDERS} at the end"
        )
    elif mixed:
        others = len(dlqs[mixed[0]]) - 1
        summary = (
            f"the poison message dead-lettered after {len(times)} deliveries in {spread * 1000:.0f} ms, into "
            f"{mixed[0]} among {others} other message(s) of other queues"
        )
    else:
        where = poison_in[0] if poison_in else "no dead letter queue"
        over = f"{spread:.1f} s" if spread >= 1 else f"{spread * 1000:.0f} ms"
        summary = f"the poison message delivered {len(times)} times over {over}, then moved to {where}, alone"
    metrics = {
        "poison_deliveries": len(times),
        "poison_burst": burst,
        "poison_seconds": round(spread, 3),
        "handled": service.handled,
        "sent": sent,
        "depth_max": max(depths, default=-1),
        "dlq_messages": {name: len(ms) for name, ms in dlqs.items()},
        "expired": len(expired),
    }
    return Outcome(loop or bool(mixed), summary, metrics=metrics)


# ---------------------------------------------------------------------- live
LIVE_SECONDS = 2.0
LIVE_GOOD = 40


def run_live(lab: LabRun) -> Outcome:
    """The same on the real server for LIVE_SECONDS, with our asyncio client; a run with a
    redelivery delay has its delays cut to a tenth (the back-off run: 3.15 s) and waits them out."""
    config = live_config(lab.config)
    policy = config.policy_for("queue", "orders")
    seconds = LIVE_SECONDS
    if policy.initial_redelivery_delay:
        lab.note(
            f"live: the redelivery delays cut to a tenth (initial_redelivery_delay {policy.initial_redelivery_delay} ms)"
        )
        delays = [policy.redelivery_delay_ms(n) for n in range(1, policy.maximum_redeliveries + 1)]
        seconds = sum(delays) / 1000 + 1.0
    with lab.live_broker(config) as live:

        def depth() -> int:
            return int(live.call(lambda: live.server.broker.destinations[ORDERS].size()))

        result = asyncio.run(play_on(live.port, seconds, depth))
    return verdict(lab, result["service"], result["sent"], result["depths"], result["dlqs"])


def live_config(config: BrokerConfig) -> BrokerConfig:
    """``config`` with its redelivery delays a tenth as long (a live run waits them in real time)."""
    policies = tuple(
        dataclasses.replace(
            p,
            initial_redelivery_delay=p.initial_redelivery_delay // 10,
            redelivery_delay=p.redelivery_delay // 10,
            maximum_redelivery_delay=p.maximum_redelivery_delay // 10 if p.maximum_redelivery_delay > 0 else -1,
        )
        for p in config.destination_policy
    )
    return config.replace(destination_policy=policies)


async def play_on(port: int, seconds: float, depth: Any) -> dict[str, Any]:
    """The live workload on the broker at ``port`` for ``seconds``, then its dead letter queues
    read (``depth()``: the orders queue's depth, sampled once a second; None: not read)."""
    from clients.stomp import StompClient

    loop = asyncio.get_running_loop()
    connect = lambda: StompClient.connect("127.0.0.1", port)  # noqa: E731
    consumer, shop, feed, reader = await connect(), await connect(), await connect(), await connect()
    started = loop.time()
    service = OrderService(None, lambda: loop.time() - started)
    orders = await consumer.subscribe(ORDERS, ack="client-individual")
    await shop.send(ORDERS, "poison", {"persistent": "true", "order": "poison"}, receipt=True)
    for i in range(QUOTES):
        expires = str(int((time.time() + QUOTE_TTL) * 1000))
        await feed.send(PRICES, f"quote {i}", {"persistent": "true", "expires": expires}, receipt=True)
    started = loop.time()  # the run's seconds count from here: on a busy disk the sends above take a while
    sent = 0
    depths: list[int] = []

    async def shop_orders() -> None:
        nonlocal sent
        while sent < LIVE_GOOD:
            await shop.send(ORDERS, f"order {sent}", {"persistent": "true", "order": str(sent)}, receipt=True)
            sent += 1
            await asyncio.sleep(min(seconds, LIVE_SECONDS) / 2 / LIVE_GOOD)

    async def serve() -> None:
        async for m in orders:
            if m.body == b"poison":
                service.poison_at.append(service.now())
                await consumer.nack(m)
            else:
                await consumer.ack(m)
                service.handled += 1

    tasks = [asyncio.create_task(shop_orders()), asyncio.create_task(serve())]
    while loop.time() - started < seconds:
        if depth is not None:
            depths.append(depth())
        await asyncio.sleep(min(1.0, seconds / 4))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(max(0.0, QUOTE_TTL + 1.5 - (loop.time() - started)))  # every quote expired and swept
    dlqs: dict[str, list[dict[str, str]]] = {}
    for name in ("/queue/ActiveMQ.DLQ", "/queue/ActiveMQ.DLQ.Queue.orders"):
        sub = await reader.subscribe(name)
        got: list[dict[str, str]] = []
        while True:
            try:
                m = await sub.get(timeout=0.3)
            except TimeoutError:
                break
            got.append(dict(m.headers) | {"body": m.body.decode()})
        if got:
            dlqs[name] = got
    for c in (consumer, shop, feed, reader):
        c.close()
    return {"service": service, "sent": sent, "depths": depths, "dlqs": dlqs}


# ---------------------------------------------------------------- the student's order service
#: ``lab check 07 --client FILE.py``: the good orders behind the poison one, each one's work, and
#: how long the service may take (a slow machine may want more).
CLIENT_ORDERS = 40  # one every ORDER_PERIOD: 2 s of orders
CLIENT_WORK = 0.01
CLIENT_DEADLINE = float(os.environ.get("MINIBROKER_LAB_CLIENT_DEADLINE", "15"))


def run_client(lab: LabRun, path: Any) -> Outcome:
    """The student's order service against the real server with the run's configuration (no
    delivery limit): ``consume(host, port, queue, count, work)``, where ``work(message_id, body)``
    raises ValueError for the poison order. Graded by how often the poison order came back
    within a minute (the loop), whether it ended on a queue where someone can look at it (a
    dead letter queue or one of the service's own), and whether every good order was processed
    once."""
    from clients.labs.student import run_beside
    from clients.stomp import StompClient

    async def shop(port: int, stop: threading.Event) -> None:  # the poison order first, then 20 good ones a second
        shop = await StompClient.connect("127.0.0.1", port)
        await shop.send(ORDERS, "poison", headers={"persistent": "true", "order": "poison"}, receipt=True)
        for i in range(CLIENT_ORDERS):
            if stop.is_set():
                break
            await asyncio.sleep(ORDER_PERIOD)
            await shop.send(ORDERS, f"order {i}", headers={"persistent": "true", "order": str(i)}, receipt=True)
        await shop.disconnect()

    async def where_poison(port: int, queues: list[str]) -> list[str]:
        reader = await StompClient.connect("127.0.0.1", port)
        found = []
        for name in queues:
            sub = await reader.subscribe(name)
            while True:
                try:
                    m = await sub.get(timeout=0.3)
                except TimeoutError:
                    break
                if m.body == b"poison":
                    found.append(name)
        await reader.disconnect()
        return found

    with lab.live_broker(lab.config) as live:
        run = run_beside(
            lambda stop: shop(live.port, stop),
            path,
            live.port,
            ORDERS,
            CLIENT_ORDERS,
            CLIENT_WORK,
            CLIENT_DEADLINE,
            poison="poison",
        )
        queues = live.call(lambda: sorted(a for a in live.server.broker.destinations if a.startswith("/queue/")))
        poison_on = asyncio.run(where_poison(live.port, queues))
    tries = run.poison_tried_at
    burst = most_in_window(tries, LOOP_WINDOW)
    processed = len(set(run.processed))
    lab.note(run.story(CLIENT_ORDERS, CLIENT_DEADLINE))
    lab.note(
        f"work() was given the poison order {len(tries)} time(s)"
        + (f" in {tries[-1] - tries[0]:.2f} s" if len(tries) > 1 else "")
        + f"; at most {burst} within {LOOP_WINDOW:.0f} s"
    )
    parked = [name for name in poison_on if name != ORDERS]
    lab.note(
        f"at the end the poison order is on {', '.join(poison_on)}"
        if poison_on
        else "at the end the poison order is on no queue: it was acknowledged and is gone"
    )
    # Still broken: a loop (the poison order back again and again), or a service stopped at
    # the deadline with the poison order still unsettled on the orders queue (held up by it,
    # or stopped before the loop could show: either way nothing proves it cured).
    loop = burst > LOOP_DELIVERIES
    stuck = not run.finished and ORDERS in poison_on
    if loop:
        summary = f"a redelivery loop: your service was given the poison order {len(tries)} times"
    elif stuck:
        summary = (
            f"the poison order never settled: your service had not returned at its {CLIENT_DEADLINE:.0f} s "
            f"deadline and the order is still on {ORDERS}"
        )
    elif not parked:
        summary = "no loop, but the poison order is " + ("still on " + ORDERS if poison_on else "lost")
    else:
        summary = f"the poison order tried {len(tries)} time(s), then kept on {parked[0]}, alone"
    metrics = {
        "poison_burst": burst,
        "poison_parked": int(bool(parked)),
        "processed_pct": round(100 * processed / CLIENT_ORDERS),
        "duplicates": run.duplicates,
    }
    return Outcome(loop or stuck, summary, metrics=metrics)


# ---------------------------------------------------------------------- ActiveMQ
#: ActiveMQ redelivers on the broker only through its redeliveryPlugin, which refuses delays under 1 s.
PLUGIN_MIN_DELAY = 1000
#: A run against ActiveMQ without the plugin: twice the live run's time (a JVM just started
#: takes its time over the first persistent sends).
ACTIVEMQ_SECONDS = 2 * LIVE_SECONDS


def activemq_config(config: BrokerConfig) -> BrokerConfig:
    """The run's configuration as ActiveMQ plays it live: a redelivery delay of the live run
    raised to the redeliveryPlugin's minimum of 1 s, the back-off capped there (six
    redeliveries 1 s apart, not 63 s of back-off); without a delay, as it is (the plugin
    cannot carry it, and ActiveMQ dead-letters a STOMP NACK at once)."""
    policies = tuple(
        dataclasses.replace(
            p,
            initial_redelivery_delay=max(p.initial_redelivery_delay, PLUGIN_MIN_DELAY),
            redelivery_delay=max(p.redelivery_delay, PLUGIN_MIN_DELAY),
            maximum_redelivery_delay=PLUGIN_MIN_DELAY,
        )
        if p.initial_redelivery_delay
        else p
        for p in live_config(config).destination_policy
    )
    return config.replace(destination_policy=policies)


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The live run against ActiveMQ with the activemq.xml written from ``activemq_config``: its
    redeliveryPlugin (where the run has a delay) and each entry's deadLetterStrategy; the
    same clients, the same rule (the orders queue's depth is not read there)."""
    policy = activemq_config(lab.config).policy_for("queue", "orders")
    seconds = ACTIVEMQ_SECONDS
    plugin = "<redeliveryPlugin" in broker.xml.text
    if plugin:
        delays = [policy.redelivery_delay_ms(n) for n in range(1, policy.maximum_redeliveries + 1)]
        seconds = 2 * sum(delays) / 1000 + 1.0  # its scheduler redelivers up to half a second late
        lab.note(
            f"ActiveMQ's redeliveryPlugin: {policy.maximum_redeliveries} redeliveries, "
            f"{', '.join(str(d) for d in delays)} ms apart (it takes no delay under {PLUGIN_MIN_DELAY} ms)"
        )
    else:
        lab.note("no redeliveryPlugin (the run has no redelivery delay): a STOMP NACK dead-letters at once")
    result = asyncio.run(play_on(broker.port, seconds, None))
    outcome = verdict(lab, result["service"], result["sent"], result["depths"], result["dlqs"])
    if not result["service"].poison_at:
        outcome.unfair = f"the poison message was not delivered once in {seconds:.0f} s: the broker was too slow"
    return outcome
