"""A growing journal kept alive by one old message, or by an offline durable subscriber.

``run(lab)`` plays one workload on the virtual clock in every run, on the
KahaDB-like growing journal (files of 64 KiB, a store limit of 1 MiB):

- a shop sends persistent 1000-byte orders to ``/queue/orders``, each waiting
  for its RECEIPT (a synchronous send), at most 100 a second; a fulfilment
  service acknowledges each a second after it came (its work), so each
  journal file holds acks of messages in the file before it;
- what keeps the journal alive: in ``old-message`` and ``drained``, one
  persistent message on ``/queue/audit`` that nobody reads; in
  ``offline-durable`` and ``subscriber-timeout``, a durable subscriber to
  ``/topic/events`` (client-id ``reporting``) that subscribes and goes away,
  and one persistent event published every 10 s;
- ``drained`` (the cure): at t=25 s the operator runs ``journal inspect``,
  sees which destination pins the files, and drains ``/queue/audit``;
- ``subscriber-timeout`` (the cure): the broker removes the durable
  subscription after 5 s offline;
- the run lasts 40 virtual seconds.

Pathology: at the end the shop has waited more than 5 s for a RECEIPT (the
store is full) while the broker holds a handful of messages.
``run_live(lab)`` plays the same on the real server; ``run_activemq(lab, broker)``
on ActiveMQ's KahaDB (``lab run 06 --against activemq``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from pathlib import Path
from typing import Any

from clients.labs import LabRun, Outcome
from minibroker.config import BrokerConfig
from minibroker.ops import statistics_replies
from storage import format_report, inspect

ORDERS, AUDIT, EVENTS = "/queue/orders", "/queue/audit", "/topic/events"
MESSAGE_RUNS = ("old-message", "drained", "ack-compaction")  # the runs kept alive by one message
BODY = "x" * 1000
SECONDS = 40.0
PERIOD = 0.01  # the shop sends at most 100 orders a second
WORK = 1.0  # the fulfilment service acknowledges an order this long after it came
EVENT_EVERY = 10.0
DRAIN_AT = 25.0
STUCK_AFTER = 5.0  # a RECEIPT awaited this long: the shop is held
FEW = 10  # "a handful": at most this many messages held by the broker
KB = 1024


class Fulfilment:
    """Acknowledges each order WORK seconds after it came."""

    def __init__(self, client: Any, now: Any) -> None:
        self.client = client
        self.now = now
        self.came: list[tuple[float, Any]] = []
        self.seen = 0
        self.acked = 0

    def tick(self) -> None:
        frames = self.client.received
        for f in frames[self.seen :]:
            if f.command == "MESSAGE":
                self.came.append((self.now(), f))
        self.seen = len(frames)
        while self.acked < len(self.came) and self.now() - self.came[self.acked][0] >= WORK:
            self.client.ack(self.came[self.acked][1])
            self.acked += 1


class Shop:
    """A synchronous producer: the next order only once the last one has its RECEIPT."""

    def __init__(self, client: Any, now: Any) -> None:
        self.client = client
        self.now = now
        self.sent = 0
        self.last_receipt_at = 0.0
        self._receipts = 0

    def receipted(self) -> int:
        return self._receipts

    def tick(self) -> None:
        got = len(self.client.frames("RECEIPT"))
        if got > self._receipts:
            self._receipts, self.last_receipt_at = got, self.now()
        if self.sent == self._receipts:
            self.client.send(ORDERS, BODY, persistent="true", receipt=f"o{self.sent}")
            self.sent += 1


def pin(net: Any, kind: str) -> Any:
    """What keeps the journal alive: one old message, or an offline durable subscriber."""
    if kind == "message":
        net.connected_client("audit").send(AUDIT, "audit record", persistent="true")
        return None
    reporting = net.client("reporting")
    reporting.connect(client_id="reporting")
    reporting.subscribe(EVENTS, "r", "client-individual", **{"activemq.subscriptionName": "daily"})
    reporting.disconnect()
    events = net.connected_client("events")

    def publish() -> None:
        events.send(EVENTS, "event", persistent="true")

    publish()
    net.every(EVENT_EVERY, publish, until=SECONDS)
    return events


def run(lab: LabRun) -> Outcome:
    net = lab.network()
    fulfilment = Fulfilment(net.connected_client("fulfilment"), lambda: net.now)
    fulfilment.client.subscribe(ORDERS, "o", "client-individual")
    net.every(PERIOD, fulfilment.tick, until=SECONDS)
    kind = "message" if lab.name in MESSAGE_RUNS else "durable"
    pin(net, kind)
    shop = Shop(net.connected_client("shop"), lambda: net.now)
    net.every(PERIOD, shop.tick, until=SECONDS)
    cfg = lab.config
    lab.note(
        f"workload: the shop sends persistent 1000-byte orders to {ORDERS}, each waiting for its RECEIPT, at most "
        f"{1 / PERIOD:.0f}/s, each acknowledged {WORK:.0f} s after it came; journal files {cfg.store.journal_max_file_length // KB} KiB, store "
        f"limit {cfg.system_usage.store_limit // KB} KiB; "
        + (
            f"one message on {AUDIT} that nobody reads"
            if kind == "message"
            else f"a durable subscriber to {EVENTS} gone away, one event every {EVENT_EVERY:.0f} s"
        )
    )
    if lab.name == "drained":
        net.at(DRAIN_AT, lambda: drain(lab, net, shop))
    net.advance(SECONDS)
    return verdict(lab, net, shop)


def journal_of(net: Any) -> Any:
    return net.broker.store.journal_for(ORDERS)


def note_inspect(lab: LabRun, journal: Any) -> None:
    """``journal inspect``'s report, the middle files elided."""
    report = inspect(journal)
    lines = format_report(report).splitlines()
    n = len(report.files)
    files = lines[1 : 1 + n]
    if n > 6:
        files = files[:2] + [f"    ... {n - 4} more files like these ..."] + files[-2:]
    lab.note("journal inspect (minibroker journal inspect <data>):")
    for line in [lines[0], *files, *lines[1 + n :]]:
        lab.note("  " + line.replace(str(lab.data_dir), "<data>"))


def drain(lab: LabRun, net: Any, shop: Shop) -> None:
    """The operator's cure: read who pins the files, drain that destination."""
    usage = net.broker.store_usage
    lab.note(
        f"t={net.now:.0f} s: the shop has waited {net.now - shop.last_receipt_at:.1f} s for a RECEIPT; store "
        f"{usage.percent}%; the operator runs journal inspect"
    )
    note_inspect(lab, journal_of(net))
    reader = net.connected_client("operator")
    reader.subscribe(AUDIT, "a", "auto")
    lab.note(f"t={net.now:.0f} s: the operator drains {AUDIT}: {len(reader.messages())} message(s) read")


def figures(broker: Any) -> dict[str, Any]:
    """The broker's own figures at the end of a run: what it holds beyond the orders in the
    fulfilment service's hands, the orders journal's files, the store's usage."""
    usage = broker.store_usage
    files = broker.store.journal_for(ORDERS).files()
    stats = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Broker")[0]
    return {
        "held": sum(d.size() for d in broker.destinations.values() if d.address != ORDERS),
        "files": len(files),
        "pinned_files": sum(1 for f in files if f.live),
        "kib": broker.store.journal_for(ORDERS).disk_usage() // KB,
        "store_pct": usage.percent,
        "limit_kib": usage.limit // KB,
        "stat_pct": stats["storePercentUsage"],
        "blocked": stats["blockedProducers"],
    }


def verdict(lab: LabRun, net: Any, shop: Shop) -> Outcome:
    blocks = [e for e in lab.trace.events("flow_block") if e["session"] == shop.client.tag]
    if blocks:
        lab.note(
            f"t={blocks[0]['ts']:.2f} s: the shop's SEND held (flow_block, usage {blocks[0]['usage']}); "
            f"{len(blocks)} flow_block(s) in all"
        )
    outcome = judge(lab, SECONDS, shop.receipted(), shop.last_receipt_at, figures(net.broker), STUCK_AFTER)
    if SECONDS - shop.last_receipt_at > STUCK_AFTER and lab.name != "drained":
        note_inspect(lab, journal_of(net))
    outcome.metrics["flow_blocks"] = len(blocks)
    return outcome


def judge(
    lab: LabRun, seconds: float, receipted: int, last_at: float, f: dict[str, Any], stuck_after: float
) -> Outcome:
    """The verdict by one rule on either clock: the shop waited more than ``stuck_after`` for
    a RECEIPT at the end while the broker holds a handful of messages."""
    waited = seconds - last_at
    live_files = f", {f['pinned_files']} of them with a live message" if f.get("pinned_files") is not None else ""
    stat = f.get("stat") or f"minibroker stat: storePercentUsage {f['stat_pct']}, blockedProducers {f['blocked']}"
    lab.note(
        f"after {seconds:.0f} s: {receipted} orders receipted, the last at t={last_at:.2f} s; "
        f"the broker holds {f['held']} message(s); the journal keeps {f['files']} file(s), "
        f"{f['kib']} KiB{live_files}; store {f['store_pct']}% of {f['limit_kib']} KiB; {stat}"
    )
    stuck = waited > stuck_after and f["held"] <= FEW
    if stuck:
        summary = (
            f"the shop is held: no RECEIPT for {waited:.0f} s, the store full ({f['store_pct']}%) with {f['held']} "
            f"message(s) in the broker, {f['files']} journal files kept for them"
        )
    else:
        summary = (
            f"{receipted} orders receipted, the last at t={last_at:.1f} s; the journal keeps "
            f"{f['files']} file(s), store {f['store_pct']}%"
        )
    metrics = {"receipted": receipted, "waited": round(waited, 1)} | {
        k: f[k] for k in ("held", "files", "pinned_files", "store_pct")
    }
    return Outcome(stuck, summary, metrics=metrics)


# ---------------------------------------------------------------- the live run
LIVE_SECONDS = 20.0  # at most: a held shop ends the run once it has waited LIVE_STUCK
LIVE_ORDERS = 1600  # twice what fills the store: a shop that got this far was not held
LIVE_STUCK = 2.0  # a RECEIPT awaited this long, live: the shop is held
LIVE_WORK = 0.2  # the fulfilment service acknowledges an order this long after it came
LIVE_AFTER_CURE = 2.0  # the drained run goes on this long after the drain
LIVE_EVENT_EVERY = 1.0
LIVE_SCALE = 5  # the subscriber timeout and its task's period, a fifth as long live


def live_config(config: BrokerConfig) -> BrokerConfig:
    """``config`` with the offline durable subscriber timeout (and its task's period) a fifth as
    long: a live run waits for it in real time."""
    broker = config.broker
    if broker.offline_durable_subscriber_timeout <= 0:
        return config
    return config.replace(
        broker={
            "offline_durable_subscriber_timeout": broker.offline_durable_subscriber_timeout // LIVE_SCALE,
            "offline_durable_subscriber_task_schedule": broker.offline_durable_subscriber_task_schedule // LIVE_SCALE,
        }
    )


def run_live(lab: LabRun) -> Outcome:
    """The same workload on the real server with real sockets, the shop as fast as its RECEIPTs
    come: it ends once the shop has waited LIVE_STUCK seconds for one (or, in ``drained``, once
    LIVE_AFTER_CURE seconds have passed since the drain), or has LIVE_ORDERS orders receipted,
    at the latest after LIVE_SECONDS."""
    config = live_config(lab.config)
    kind = "message" if lab.name in MESSAGE_RUNS else "durable"
    if config.broker.offline_durable_subscriber_timeout > 0:
        lab.note(
            f"live: the offline durable subscriber timeout cut to a {LIVE_SCALE}th "
            f"({config.broker.offline_durable_subscriber_timeout} ms)"
        )
    cfg = config
    lab.note(
        f"workload, live: the shop sends persistent 1000-byte orders to {ORDERS}, each once the last has its "
        f"RECEIPT, each acknowledged {LIVE_WORK} s after it came; journal files {cfg.store.journal_max_file_length // KB} "
        f"KiB, store limit {cfg.system_usage.store_limit // KB} KiB; "
        + (
            f"one message on {AUDIT} that nobody reads"
            if kind == "message"
            else f"a durable subscriber to {EVENTS} gone away, one event every {LIVE_EVENT_EVERY:.0f} s"
        )
    )
    with lab.live_broker(config) as live:

        def inspect_live(seconds: float, waited: float) -> None:
            lab.note(
                f"t={seconds:.1f} s: the shop has waited {waited:.1f} s for a RECEIPT; the operator runs journal inspect"
            )
            live.call(lambda: note_inspect(lab, live.server.broker.store.journal_for(ORDERS)))

        def read_state() -> dict[str, Any]:
            return dict(live.call(lambda: figures(live.server.broker)))

        played = asyncio.run(play_on(live.port, kind, read_state, inspect_live if lab.name == "drained" else None))
        if played["drained"] is not None:
            lab.note(f"t={played['drained']:.1f} s: the operator drains {AUDIT}: 1 message read")
        found = played["found"]
        stuck = played["seconds"] - played["last_at"] > LIVE_STUCK and lab.name != "drained"
        if stuck:
            live.call(lambda: note_inspect(lab, live.server.broker.store.journal_for(ORDERS)))
        outcome = judge(lab, played["seconds"], played["receipted"], played["last_at"], found, LIVE_STUCK)
    if not outcome.pathology and lab.spec.expect == "pathology" and played["seconds"] >= LIVE_SECONDS:
        outcome.unfair = (
            f"the shop had {played['receipted']} orders receipted in {played['seconds']:.0f} s: "
            "too slow to fill the store and wait in the run's time"
        )
    return outcome


async def play_on(port: int, kind: str, read_state: Any, inspect_live: Any = None) -> dict[str, Any]:
    """Fulfilment, what pins the journal (``kind``: message or durable) and the shop, on the
    broker at ``port``; ``read_state()``: the broker's figures, read at the end while every
    client is still connected (``{}`` where they cannot be read); with ``inspect_live`` (the drained run) the operator, once the shop has
    waited LIVE_STUCK, calls it (journal inspect) and drains ``/queue/audit``."""
    from clients.stomp import StompClient

    loop = asyncio.get_running_loop()
    started = loop.time()

    def now() -> float:
        return loop.time() - started

    def connect(**kw: Any) -> Any:
        return StompClient.connect("127.0.0.1", port, **kw)

    fulfilment, shop, pinner = await connect(), await connect(), await connect()
    conns = [fulfilment, shop, pinner]
    orders = await fulfilment.subscribe(ORDERS, ack="client-individual")
    if kind == "message":
        await pinner.send(AUDIT, "audit record", {"persistent": "true"}, receipt=True)
    else:
        reporting = await connect(client_id="reporting")
        await reporting.subscribe(
            EVENTS, id="r", ack="client-individual", headers={"activemq.subscriptionName": "daily"}
        )
        await reporting.disconnect()
    receipted, last_at = 0, 0.0

    async def send_orders() -> None:
        nonlocal receipted, last_at
        while True:
            await shop.send(ORDERS, BODY, {"persistent": "true"}, receipt=True, timeout=None)
            receipted, last_at = receipted + 1, now()

    async def fulfil() -> None:
        came: deque[tuple[float, Any]] = deque()
        while True:
            with contextlib.suppress(TimeoutError):
                came.append((now(), await orders.get(timeout=LIVE_WORK / 4)))
            while came and now() - came[0][0] >= LIVE_WORK:
                await fulfilment.ack(came.popleft()[1])

    async def publish_events() -> None:
        while True:
            await pinner.send(EVENTS, "event", {"persistent": "true"}, timeout=None)
            await asyncio.sleep(LIVE_EVENT_EVERY)

    tasks = [asyncio.create_task(send_orders()), asyncio.create_task(fulfil())]
    if kind == "durable":
        tasks.append(asyncio.create_task(publish_events()))
    drained_at: float | None = None
    try:
        while now() < LIVE_SECONDS and receipted < LIVE_ORDERS:
            await asyncio.sleep(0.05)
            waited = now() - last_at
            if drained_at is not None:
                if now() - drained_at >= LIVE_AFTER_CURE:
                    break
            elif waited > LIVE_STUCK:
                if inspect_live is None:
                    break
                inspect_live(now(), waited)
                operator = await connect()
                conns.append(operator)
                await (await operator.subscribe(AUDIT)).get(timeout=10)
                drained_at = now()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    seconds = now()
    found = read_state()
    for conn in conns:
        conn.close()
    return {"seconds": seconds, "receipted": receipted, "last_at": last_at, "drained": drained_at, "found": found}


# ---------------------------------------------------------------- against ActiveMQ
def activemq_config(config: BrokerConfig) -> BrokerConfig:
    """ActiveMQ runs what the live run runs: the offline durable subscriber timeout a fifth as long."""
    return live_config(config)


def kahadb_files(kahadb: Path) -> dict[str, int]:
    """What is on disk in ActiveMQ's KahaDB directory: its journal files (``db-N.log``) and the
    bytes of everything there (the journal, its index ``db.data``, ``db.redo``: what storeUsage counts)."""
    files = [p for p in kahadb.iterdir() if p.is_file()] if kahadb.is_dir() else []
    return {
        "files": sum(1 for p in files if p.name.startswith("db-") and p.name.endswith(".log")),
        "kib": sum(p.stat().st_size for p in files) // KB,
    }


async def activemq_statistics(port: int) -> Any:
    """One sample of ActiveMQ's statistics plugin (the broker's and each destination's figures)."""
    from clients.doctor.live.read_stomp import StompReader
    from clients.doctor.live.target import Target

    reader = StompReader(Target("stomp", "127.0.0.1", port, None, None))
    await reader.open()
    try:
        return await reader.sample(0.0)
    finally:
        await reader.close()


def run_activemq(lab: LabRun, broker: Any) -> Outcome:
    """The live run's workload on ActiveMQ (``activemq.xml`` from the run's TOML: 64 KiB journal
    files, a 1 MiB storeUsage, the cleanup every second): the db-N.log files counted in its KahaDB
    directory while the clients are still connected, its statistics plugin read afterwards (the
    store's percent, what it holds), its log's "Persistent store is Full" lines; judged by the
    live run's rule."""
    config = activemq_config(lab.config)
    kind = "message" if lab.name in MESSAGE_RUNS else "durable"
    kahadb = broker.data_dir / "kahadb"
    store = config.store
    lab.note(
        f"ActiveMQ's KahaDB: journalMaxFileLength {store.journal_max_file_length // KB} KiB, storeUsage "
        f"{config.system_usage.store_limit // KB} KiB, cleanupInterval {store.cleanup_interval} ms, "
        f"checkpointInterval {store.checkpoint_interval} ms"
        + (
            f", offlineDurableSubscriberTimeout {config.broker.offline_durable_subscriber_timeout} ms"
            if config.broker.offline_durable_subscriber_timeout > 0
            else ""
        )
    )

    def inspect_live(seconds: float, waited: float) -> None:
        on_disk = kahadb_files(kahadb)
        lab.note(
            f"t={seconds:.1f} s: the shop has waited {waited:.1f} s for a RECEIPT; KahaDB keeps {on_disk['files']} "
            f"db-N.log files; the operator drains {AUDIT}"
        )

    played = asyncio.run(
        play_on(broker.port, kind, lambda: kahadb_files(kahadb), inspect_live if lab.name == "drained" else None)
    )
    stats = asyncio.run(activemq_statistics(broker.port))
    full = broker.log("Persistent store is Full")
    if full:
        said = full[0][full[0].index("Persistent store is Full") :].split(" See ")[0]
        lab.note(f"ActiveMQ's log, {len(full)} time(s): {said}")
    held = sum(d.size for d in stats.destinations if d.name != ORDERS)
    found = played["found"] | {
        "held": held,
        "pinned_files": None,  # KahaDB's index is not read: which files hold a live message is not known here
        "store_pct": stats.store_pct,
        "limit_kib": config.system_usage.store_limit // KB,
        "stat": f"ActiveMQ's statistics plugin: storePercentUsage {stats.store_pct}; its log: the store full "
        f"{len(full)} time(s)",
    }
    return judge(lab, played["seconds"], played["receipted"], played["last_at"], found, LIVE_STUCK)
