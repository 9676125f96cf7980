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
``run_live(lab)`` plays the same on the real server.
"""

from __future__ import annotations

from typing import Any

from clients.labs import LabRun, Outcome
from minibroker.ops import statistics_replies
from storage import format_report, inspect

ORDERS, AUDIT, EVENTS = "/queue/orders", "/queue/audit", "/topic/events"
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
    kind = "message" if lab.name in ("old-message", "drained") else "durable"
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


def verdict(lab: LabRun, net: Any, shop: Shop) -> Outcome:
    broker = net.broker
    usage = broker.store_usage
    journal = journal_of(net)
    files = journal.files()
    pinned = sum(1 for f in files if f.live)
    # what the broker holds beyond the orders in the fulfilment service's hands (a second's worth)
    held = sum(d.size() for d in broker.destinations.values() if d.address != ORDERS)
    waited = SECONDS - shop.last_receipt_at
    blocks = [e for e in lab.trace.events("flow_block") if e["session"] == shop.client.tag]
    if blocks:
        lab.note(
            f"t={blocks[0]['ts']:.2f} s: the shop's SEND held (flow_block, usage {blocks[0]['usage']}); "
            f"{len(blocks)} flow_block(s) in all"
        )
    stats = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Broker")[0]
    lab.note(
        f"after {SECONDS:.0f} s: {shop.receipted()} orders receipted, the last at t={shop.last_receipt_at:.2f} s; "
        f"the broker holds {held} message(s); the journal keeps {len(files)} file(s), "
        f"{journal.disk_usage() // KB} KiB, {pinned} of them with a live message; store {usage.percent}% of "
        f"{usage.limit // KB} KiB; minibroker stat: storePercentUsage {stats['storePercentUsage']}, "
        f"blockedProducers {stats['blockedProducers']}"
    )
    if waited > STUCK_AFTER and lab.name != "drained":
        note_inspect(lab, journal)
    stuck = waited > STUCK_AFTER and held <= FEW
    if stuck:
        summary = (
            f"the shop is held: no RECEIPT for {waited:.0f} s, the store full ({usage.percent}%) with {held} "
            f"message(s) in the broker, {len(files)} journal files kept for them"
        )
    else:
        summary = (
            f"{shop.receipted()} orders receipted, the last at t={shop.last_receipt_at:.1f} s; the journal keeps "
            f"{len(files)} file(s), store {usage.percent}%"
        )
    metrics = {
        "receipted": shop.receipted(),
        "waited": round(waited, 1),
        "held": held,
        "files": len(files),
        "pinned_files": pinned,
        "store_pct": usage.percent,
        "flow_blocks": len(blocks),
    }
    return Outcome(stuck, summary, metrics=metrics)
