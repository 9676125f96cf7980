"""The journal-threshold trap: "Enqueue capacity threshold exceeded" on a queue holding a few messages.

``run(lab)`` plays the article's reproducer on the virtual clock with real ring
journals (8 files of 64 KiB), chosen by the run's name. One *round* is: leave
one message behind, then send and consume ordinary messages in batches of 50
(200-byte bodies, the article's ``--content-size=200``) until the journal moves
to its next file. Rounds go on until an enqueue is refused.

- ``priority``: the message left behind has priority 1, the ordinary ones 4;
  each batch is taken by a receiver that stops after 50 (``qpid-receive -m``),
  so the low-priority messages are never reached.
- ``selector``: the only consumer's selector (``kind = 'order'``) never
  matches the message left behind (``kind: audit``).
- ``client-ack``: one consumer in client-individual mode receives everything
  and acknowledges everything but the first message of each round.
- ``all-consumed`` (control): the priority workload, but each round ends by
  consuming the low-priority message too; three times round the ring.
- ``compacted`` (cure): the priority workload until refused; the broker is
  stopped, ``minibroker journal compact`` runs, the broker restarts, the
  refused message is sent again and three more rounds run; then everything is
  drained and counted.
- ``growing`` (contrast): the priority workload for twice as many rounds as
  the ring has files, on the growing (KahaDB) layout; then the pinning
  messages are consumed.

Pathology: an enqueue refused while the queue holds no more messages than
the ring has files.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from clients.labs import LabRun, Outcome
from minibroker.edge import VirtualClient, VirtualNetwork
from storage import Journal, format_report, inspect
from storage.ring import RingLayout

QUEUE = "/queue/Durable"
BATCH = 50
BODY = "x" * 200  # the article's --content-size=200
THRESHOLD_TEXT = "Enqueue capacity threshold exceeded"


def run(lab: LabRun) -> Outcome:
    if lab.name == "compacted":
        return compacted(lab)
    if lab.name == "growing":
        return growing(lab)
    if lab.name == "all-consumed":
        return all_consumed(lab)
    return pinned(lab, lab.name)


class Workload:
    """The article's reproducer: rounds of one message left behind, then traffic.

    ``kind`` is how the message is left behind: ``priority``, ``selector`` or
    ``client-ack``. ``first`` numbers the left-behind messages (``pin-N``).
    """

    def __init__(self, net: VirtualNetwork, kind: str, *, first: int = 0) -> None:
        self.net = net
        self.kind = kind
        self.producer = net.connected_client("producer")
        self.sent = 0  # messages accepted
        self.consumed = 0
        self.pins: list[str] = []
        self.next_pin = first
        self.refusal: Any = None  # the ERROR frame of the first refused enqueue
        self.waiting = 0  # ordinary messages sent and not yet consumed (priority kind)
        self.consumer: VirtualClient | None = None
        self.taken = 0  # client-ack: messages of self.consumer dealt with so far
        if kind == "selector":
            self.consumer = net.connected_client("selective")
            self.consumer.subscribe(QUEUE, "s", "auto", selector="kind = 'order'")
        elif kind == "client-ack":
            self.consumer = net.connected_client("worker")
            self.consumer.subscribe(QUEUE, "s", "client-individual", **{"activemq.prefetchSize": "1000"})

    # -- the journal
    @property
    def journal(self) -> Journal:
        return self.net.broker.store.journal_for(QUEUE)

    @property
    def depth(self) -> int:
        return self.net.broker.destinations[QUEUE].size()

    # -- sending
    def send(self, body: str, **headers: str) -> bool:
        """One persistent message; False (and the ERROR kept) when refused."""
        errors = len(self.producer.frames("ERROR"))
        self.producer.send(QUEUE, body, persistent="true", **headers)
        new = self.producer.frames("ERROR")[errors:]
        if new:
            if self.refusal is None:
                self.refusal = new[0]
            return False
        self.sent += 1
        return True

    def leave_one_behind(self) -> bool:
        """Send the message this round leaves behind: ``pin-N``, 200 bytes like the others."""
        name = f"pin-{self.next_pin}"
        headers = {"priority": "1"} if self.kind == "priority" else {"kind": "audit"} if self.kind == "selector" else {}
        ok = self.send(name.ljust(len(BODY), "."), pin=name, **headers)
        if ok:
            self.pins.append(name)
            self.next_pin += 1
            if self.kind == "client-ack":
                self.taken += 1  # the worker received it and keeps it unacknowledged
        return ok

    def batch(self) -> bool:
        """BATCH ordinary messages sent and consumed; False when one was refused."""
        headers = {"priority": "4"} if self.kind == "priority" else {"kind": "order"} if self.kind == "selector" else {}
        ok = True
        for _ in range(BATCH):
            if not self.send(BODY, **headers):
                ok = False
                break
            self.waiting += 1
        self.settle()
        return ok

    def settle(self) -> None:
        """Consume the ordinary messages sent so far."""
        if self.kind == "priority":
            self.receive(self.waiting)
        elif self.kind == "selector":
            self.consumed += self.waiting
        elif self.kind == "client-ack":
            assert self.consumer is not None
            for message in self.consumer.messages()[self.taken :]:
                self.consumer.ack(message)
                self.consumed += 1
            self.taken = len(self.consumer.messages())
        self.waiting = 0

    def receive(self, n: int, selector: str | None = None) -> list[Any]:
        """``qpid-receive -m n``: take the n highest-priority messages, then go.

        The receiver's prefetch may also take low-priority messages once its
        acks free room; it gives them back unacknowledged when it leaves (they
        come back flagged redelivered, still in their journal files).
        """
        if n <= 0:
            return []
        receiver = self.net.connected_client("receiver")
        headers = {"activemq.prefetchSize": str(n)} | ({"selector": selector} if selector else {})
        receiver.subscribe(QUEUE, "r", "client-individual", **headers)
        taken = receiver.messages()[:n]
        for message in taken:
            receiver.ack(message)
        receiver.disconnect()
        self.consumed += len(taken)
        return taken

    def round(self) -> bool:
        """One message left behind, then batches until the journal rolls."""
        if not self.leave_one_behind():
            return False
        start = self.journal.current_file_id
        while self.journal.current_file_id == start:
            if not self.batch():
                return False
        self.net.advance(2.0)  # the article's `sleep 2`
        return True

    def rounds(self, limit: int) -> int:
        """Rounds until an enqueue is refused (or ``limit``); returns how many completed."""
        done = 0
        while done < limit and self.round():
            done += 1
        return done


def record_bytes(journal: Journal) -> int:
    """Bytes of the live enqueue records."""
    return sum(rec.location.length for rec in journal.recovered(payloads=False))


def describe_refusal(lab: LabRun, w: Workload) -> None:
    error = w.refusal
    lab.note(
        f"enqueue #{w.sent + 1} refused: ERROR message:{error.headers.get('message')!r}; "
        f"the producer's connection is {'closed' if w.producer.closed else 'still open'}"
    )


def look_ahead(journal: Journal) -> str:
    """The look-ahead of ``RingLayout.check_enqueue`` for a pin-sized record, in words."""
    layout = RingLayout(journal.config)
    files = journal.files()
    current = next(f for f in files if f.current)
    record = journal.location(max(pin.seq for f in files for pin in f.pins)).length
    ahead = current.used + record + layout.reserve
    reached = [(current.file_id + step) % layout.count for step in range(1, (ahead - 1) // layout.size + 1)]
    live = {f.file_id: f.live for f in files}
    holding = [f"file {fid} ({live[fid]} live)" for fid in reached if live[fid]]
    return (
        f"look-ahead: file {current.file_id} at offset {current.used} + record {record} B + reserve "
        f"{layout.reserve} B (20% of {layout.size * layout.count} B) = {ahead} B reaches file(s) "
        f"{', '.join(map(str, reached))}; still live: {', '.join(holding) or 'none'}"
    )


def note_report(lab: LabRun, title: str, source: Any, *, most: int = 8) -> Any:
    """``journal inspect``'s report as evidence lines (the middle files elided past ``most``)."""
    report = inspect(source)
    lines = format_report(report).splitlines()
    n = len(report.files)
    files = lines[1 : 1 + n]
    if n > most:
        files = files[:3] + [f"    ... {n - 5} more files like these ..."] + files[-2:]
    lab.note(title)
    for line in [lines[0], *files, *lines[1 + n :]]:
        lab.note("  " + line.replace(str(lab.data_dir), "<data>"))
    return report


def note_journal_full(lab: LabRun) -> int:
    events = lab.trace.events("journal_full") if lab.trace else []
    if events:
        e = events[0]
        pinned = sum(1 for n in e["file_live"].values() if n)
        lab.note(
            f"trace: {len(events)} journal_full event(s); the first at t={e['ts']:.0f}s on {e['store']}: "
            f"current file {e['file']}, {e['live']} live enqueue(s) in {pinned} of {e['files']} files"
        )
    return len(events)


def pinned(lab: LabRun, kind: str) -> Outcome:
    net = lab.network()
    w = Workload(net, kind)
    store = lab.config.store
    rounds = w.rounds(limit=2 * store.file_count)
    if w.refusal is None:
        return Outcome(False, f"no enqueue refused in {rounds} rounds", metrics={"rounds": rounds, "sent": w.sent})
    how = {
        "priority": "low-priority message no receiver reached",
        "selector": "message the consumer's selector skipped",
        "client-ack": "message the worker holds unacknowledged",
    }[kind]
    lab.note(
        f"{rounds} full round(s): in each, one {how}, then ordinary messages sent and consumed "
        f"50 at a time until the journal moved to its next file"
    )
    describe_refusal(lab, w)
    w.settle()  # the consumer takes the ordinary messages the refusal left: dequeues are never refused
    depth, journal = w.depth, w.journal
    live_bytes = record_bytes(journal)
    one_each = all(f.live <= 1 for f in journal.files())
    ring = store.file_count * store.file_size
    again = w.leave_one_behind()  # the article's last step: try to enqueue one more such message
    lab.note(
        f"once the rest is consumed the queue holds {depth} message(s) ({', '.join(w.pins)}): "
        f"{live_bytes} bytes of records in a {ring // 1024} KiB ring ({100 * live_bytes / ring:.1f}%), "
        f"after {w.sent} messages went through; one more 200-byte enqueue: {'accepted' if again else 'refused again'}"
    )
    lab.note(look_ahead(journal))
    note_report(lab, "journal inspect (minibroker journal inspect <data>):", journal)
    full = note_journal_full(lab)
    refused = not again
    summary = (
        f"enqueues refused with only {depth} message(s) on the queue, "
        f"{'one per journal file' if one_each else 'a few per journal file'}"
        if refused and depth <= store.file_count
        else f"the queue holds {depth} messages; refused: {refused}"
    )
    return Outcome(
        refused and depth <= store.file_count,
        summary,
        metrics={
            "rounds": rounds,
            "sent": w.sent,
            "live": depth,
            "live_bytes": live_bytes,
            "ring_bytes": ring,
            "journal_full_events": full,
        },
    )


def all_consumed(lab: LabRun) -> Outcome:
    net = lab.network()
    w = Workload(net, "priority")
    limit = 3 * lab.config.store.file_count
    done = 0
    while done < limit and w.round():
        w.pins.pop()
        w.receive(1)  # this round's low-priority message is consumed too
        done += 1
    rolls = len(lab.trace.events("journal_roll")) if lab.trace else 0
    lab.note(
        f"{done} rounds, {w.sent} messages sent and {w.consumed} consumed, each round's low-priority "
        f"message included; the journal rolled {rolls} time(s): {rolls // lab.config.store.file_count} "
        f"times round the ring"
    )
    report = note_report(lab, "journal inspect:", w.journal)
    refused = w.refusal is not None
    if refused:
        describe_refusal(lab, w)
    summary = (
        f"refused after {w.sent} messages"
        if refused
        else f"nothing refused: {w.sent} messages through the ring, {report.live} live at the end"
    )
    return Outcome(refused, summary, metrics={"rounds": done, "sent": w.sent, "live": report.live, "rolls": rolls})


def compact_offline(lab: LabRun) -> list[str]:
    """``minibroker journal compact <data>``, as an operator runs it with the broker stopped."""
    from clients.cli import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli(["journal", "compact", str(lab.data_dir)])
    lines = [f"minibroker journal compact <data>: exit status {status}"]
    return lines + ["  " + line.replace(str(lab.data_dir), "<data>") for line in out.getvalue().splitlines()]


def compacted(lab: LabRun) -> Outcome:
    net = lab.network()
    w = Workload(net, "priority")
    rounds = w.rounds(limit=2 * lab.config.store.file_count)
    if w.refusal is None:
        return Outcome(True, f"the ring never refused in {rounds} rounds: nothing to cure")
    w.settle()
    refused_pin = f"pin-{w.next_pin}"
    again = w.leave_one_behind()
    before = inspect(w.journal)
    lab.note(
        f"as in the priority run: {rounds} rounds, then enqueue #{w.sent + 1} refused; the queue holds "
        f"{w.depth} message(s) pinning {before.pinned_files} of {len(before.files)} files, and {refused_pin} "
        f"is {'accepted' if again else 'refused'}"
    )
    compaction: list[str] = []
    net.restart(while_down=lambda: compaction.extend(compact_offline(lab)))
    lab.note("the broker stopped; then:")
    for line in compaction:
        lab.note("  " + line)
    lab.note("the broker started again on the compacted journal")
    after = Workload(net, "priority", first=w.next_pin)
    retried = after.leave_one_behind()
    more = after.rounds(limit=3)
    lab.note(
        f"{refused_pin} sent again: {'accepted' if retried else 'refused'}; then {more} more round(s) "
        f"of the same workload ({after.sent} messages in all): "
        f"{'refused again' if after.refusal is not None else 'no enqueue refused'}"
    )
    drain = net.connected_client("drain")
    drain.subscribe(QUEUE, "d", "client-individual", **{"activemq.prefetchSize": "1000"})
    got = drain.messages()
    for m in got:
        drain.ack(m)
    names = [m.body.decode().rstrip(".") for m in got]
    ids = [m.headers["message-id"] for m in got]
    expected = w.pins + after.pins
    missing = set(expected) - set(names)
    doubled = len(ids) - len(set(ids)) + len(names) - len(set(names))
    unexpected = set(names) - set(expected)
    lab.note(
        f"drained: {len(got)} message(s), expected {len(expected)} (every pin before and after the cure); "
        f"missing {len(missing)}, duplicated {doubled}, unexpected {len(unexpected)}"
    )
    ok = after.refusal is None and retried and not missing and not doubled and not unexpected
    summary = (
        f"after compaction the workload went on: {after.sent} enqueues accepted, all {len(expected)} "
        f"pinned messages kept, none duplicated"
        if ok
        else "compaction did not cure the ring"
    )
    return Outcome(
        not ok,
        summary,
        metrics={
            "pins_before": len(w.pins),
            "pins_after": len(expected),
            "accepted_after": after.sent,
            "drained": len(got),
        },
    )


def disk(directory: Path) -> tuple[int, int]:
    """(files, bytes) of the growing journal's files on disk."""
    files = sorted(directory.glob("db-*.log"))
    return len(files), sum(f.stat().st_size for f in files)


def growing(lab: LabRun) -> Outcome:
    net = lab.network()
    w = Workload(net, "priority")
    directory = lab.data_dir / "journal"
    rounds = w.rounds(limit=16)
    files, size = disk(directory)
    live_bytes = record_bytes(w.journal)
    lab.note(
        f"{rounds} rounds of the priority workload ({w.sent} messages), twice as many as the ring has files: "
        f"{'an enqueue was refused' if w.refusal is not None else 'no enqueue refused'}"
    )
    lab.note(
        f"the queue holds {w.depth} message(s), {live_bytes} bytes of records; the journal keeps {files} files, "
        f"{size // 1024} KiB on disk, and grows by one file a round"
    )
    report = note_report(lab, "journal inspect:", w.journal)
    kept_by_acks = sum(1 for f in report.files if any(p.file_id != f.file_id for p in f.pins))
    if kept_by_acks:
        lab.note(
            f"{kept_by_acks} file(s) also hold acks of messages in an older file that is kept, which keeps "
            "them too, message or not: an ack cannot be deleted before its message"
        )
    pins = w.depth
    oldest = w.pins[0]
    w.receive(pins - 1, selector=f"pin <> '{oldest}'")  # every low-priority message but the oldest
    files_one, size_one = disk(directory)
    chained = [f for f in inspect(w.journal).files if not f.live and f.pins and not f.current]
    lab.note(
        f"{pins - 1} of the {pins} low-priority messages consumed, all but {oldest} (in the first file): the "
        f"journal still keeps {files_one} files, {size_one // 1024} KiB, for one message: {len(chained)} of them "
        f"hold no live message, only acks of messages in a file that is kept (KahaDB's rule)"
    )
    w.receive(1)
    files_after, size_after = disk(directory)
    lab.note(f"{oldest} consumed too: the journal shrinks to {files_after} file(s), {size_after // 1024} KiB")
    refused = w.refusal is not None
    summary = (
        f"nothing refused; instead the journal grew to {files} files ({size // 1024} KiB) for {pins} messages, "
        f"and kept {files_one} for the last one"
        if not refused
        else "the growing layout refused an enqueue"
    )
    return Outcome(
        refused,
        summary,
        metrics={
            "rounds": rounds,
            "files": files,
            "disk_kib": size // 1024,
            "live": pins,
            "files_one_left": files_one,
            "files_after": files_after,
        },
    )
