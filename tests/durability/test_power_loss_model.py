"""Receipts against power losses, model-based (hypothesis).

A producer sends persistent messages to two queues and to a topic, with a
RECEIPT or without, alone or in transactions it commits or aborts; it sends
non-persistent messages too, which a small memory limit spills to the temp
store. A consumer holds durable subscriptions to the topic (made and removed,
with receipts) and client-individual subscriptions to the queues, and ACKs
and NACKs what it gets, with a RECEIPT or without. The journal's files are
tiny, so it rolls and collects all the time (the growing journal also with
ack compaction at every collection that deletes nothing). At any step the power may go
(``disk_faults.PowerLossDisk``: what was not durable is lost, or a random
prefix of it survives, torn). The broker starts again on what is left, and:

- every message whose SEND (or COMMIT) was receipted, and whose ACK was not,
  comes back exactly once;
- no message whose ACK (or the COMMIT of its ACK) was receipted comes back;
- nothing comes back twice, nothing that was never sent, nothing of an
  aborted transaction;
- every durable subscription whose SUBSCRIBE was receipted exists, and none
  whose removal was receipted.

After the check everything is drained (receipted ACKs) and the model starts
from empty again. The same machine on a broker with ``fsync = "never"``
loses receipted messages: the last test shows the checks catch it.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from disk_faults import PowerLossDisk
from minibroker.config import BrokerConfig, parse_config
from minibroker.destinations import Topic
from minibroker.edge import VirtualClient, VirtualNetwork
from storage.fileio import using

QUEUES = ("/queue/q0", "/queue/q1")
TOPIC = "/topic/t"
NAMES = ("a", "b")
SPILLED = "/queue/np"
BODY_PAD = "p" * 150  # a few dozen records fill a tiny journal file


def broker_config(layout: str, fsync: str = "always", compact_acks: bool = False) -> BrokerConfig:
    store: dict[str, Any] = {"layout": layout, "fsync": fsync}
    if layout == "growing":
        store["journal_max_file_length"] = "4 kb"
    if compact_acks:  # at every collection that deletes nothing (KahaDB's compactAcksAfterNoGC), many files
        store.update(
            {
                "compact_acks_after_no_gc": 1,
                "compact_acks_ignores_store_growth": True,
                "journal_max_file_length": "2 kb",
            }
        )
    else:
        store.update({"file_size": "8 kb", "file_count": 8})
    return parse_config(
        {
            "store": store,
            "destination_policy": [
                {"queue": "np", "memory_limit": "4 kb", "maximum_redeliveries": -1},
                {"queue": ">", "maximum_redeliveries": -1},
                {"topic": ">", "maximum_redeliveries": -1},
            ],
        }
    )


class Place:
    """One queue's or durable subscription's messages, as the model knows them."""

    def __init__(self) -> None:
        self.owed: set[str] = set()  # receipted, not receipted-acknowledged: exactly once
        self.maybe: set[str] = set()  # may come back (at most once)
        self.gone: set[str] = set()  # receipted-acknowledged, aborted: never

    def sent(self, body: str, receipted: bool) -> None:
        (self.owed if receipted else self.maybe).add(body)

    def acked(self, body: str, receipted: bool) -> None:
        self.owed.discard(body)
        self.maybe.discard(body)
        (self.gone if receipted else self.maybe).add(body)

    def check(self, name: str, bodies: list[str]) -> None:
        twice = [b for b, n in Counter(bodies).items() if n > 1]
        assert not twice, f"{name}: came back more than once: {twice}"
        got = set(bodies)
        assert not (self.owed - got), f"{name}: receipted and lost: {sorted(self.owed - got)}"
        assert not (got & self.gone), f"{name}: receipted ACK undone: {sorted(got & self.gone)}"
        assert got <= self.owed | self.maybe, f"{name}: never sent: {sorted(got - self.owed - self.maybe)}"


class PowerLossModel(RuleBasedStateMachine):
    """The machine; ``config`` says the broker's (a subclass per layout)."""

    config: BrokerConfig = broker_config("growing")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="minibroker-powerloss-"))
        self.disk = PowerLossDisk(self.dir / "data")
        self._using = using(self.disk)
        self._using.__enter__()
        self.net = VirtualNetwork(self.config, data_dir=self.disk.root, check_teardown=False)
        self.n = 0
        self.places: dict[str, Place] = {q: Place() for q in QUEUES}
        #: durable subscriptions by name: True when receipted, False while its removal is not
        self.durables: dict[str, bool] = {}
        self.ghosts: dict[str, Place] = {}  # removed: what they held (a new one of the name starts from it)
        self.removed: dict[str, bool] = {}  # removed durable subscriptions: was the removal receipted?
        self._connect()

    def teardown(self) -> None:
        try:
            self.net.stop()
        finally:
            self._using.__exit__(None, None, None)
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- clients
    def _connect(self) -> None:
        self.producer = self._client(None)
        self.consumer = self._client("c")
        self.settled: set[int] = set()
        for n, queue in enumerate(QUEUES):
            self.consumer.subscribe(queue, f"q{n}", "client-individual", **{"activemq.prefetchSize": "4"})

    def _client(self, client_id: str | None) -> VirtualClient:
        c = self.net.client()
        reply = c.connect("1.2", **({"client-id": client_id} if client_id else {}))
        assert reply.command == "CONNECTED", reply
        return c

    def _subscribe_durable(self, name: str, receipt: str | None = None) -> None:
        headers = {"activemq.subscriptionName": name, "activemq.prefetchSize": "4"}
        if receipt:
            headers["receipt"] = receipt
        self.consumer.subscribe(TOPIC, f"d{name}", "client-individual", **headers)

    def _receipted(self, c: VirtualClient, receipt: str) -> bool:
        return any(f.command == "RECEIPT" and f.headers.get("receipt-id") == receipt for f in c.received[-20:])

    def _body(self) -> str:
        self.n += 1
        return f"m{self.n}"

    def _held(self) -> list[Any]:
        """The consumer's deliveries the model has not settled (acknowledged, NACKed,
        rolled back: a message that comes again is a new frame)."""
        return [f for f in self.consumer.messages() if id(f) not in self.settled]

    def _settle(self, frames: list[Any]) -> None:
        self.settled.update(id(f) for f in frames)

    def _place_of(self, frame: Any) -> Place:
        sub = frame.headers["subscription"]
        if sub.startswith("q"):
            return self.places[QUEUES[int(sub[1:])]]
        return self.places[f"durable:{sub[1:]}"]

    # -- sends
    @rule(queue=st.sampled_from(QUEUES), receipted=st.booleans())
    def send_to_a_queue(self, queue: str, receipted: bool) -> None:
        body = self._body()
        headers = {"persistent": "true", **({"receipt": body} if receipted else {})}
        self.producer.send(queue, body + BODY_PAD, **headers)
        self.places[queue].sent(body, receipted and self._receipted(self.producer, body))

    @rule(receipted=st.booleans())
    def send_to_the_topic(self, receipted: bool) -> None:
        body = self._body()
        headers = {"persistent": "true", **({"receipt": body} if receipted else {})}
        self.producer.send(TOPIC, body + BODY_PAD, **headers)
        ok = receipted and self._receipted(self.producer, body)
        for name in self.durables:
            self.places[f"durable:{name}"].sent(body, ok)

    @rule()
    def send_to_the_temp_store(self) -> None:
        self.producer.send(SPILLED, "np" + BODY_PAD * 4)

    @rule(
        queue=st.sampled_from(QUEUES),
        count=st.integers(1, 3),
        acks=st.integers(0, 2),
        end=st.sampled_from(["commit", "commit-receipted", "abort"]),
    )
    def transaction(self, queue: str, count: int, acks: int, end: str) -> None:
        tx = f"tx{self.n}"
        self.producer.send_frame("BEGIN", {"transaction": tx})
        self.consumer.send_frame("BEGIN", {"transaction": tx})
        bodies = [self._body() for _ in range(count)]
        for body in bodies:
            self.producer.send(queue, body + BODY_PAD, persistent="true", transaction=tx)
        held = self._held()[:acks]
        for frame in held:
            self.consumer.ack(frame, transaction=tx)
        receipt = {"receipt": f"{tx}-end"} if end == "commit-receipted" else {}
        command = "ABORT" if end == "abort" else "COMMIT"
        self.producer.send_frame(command, {"transaction": tx, **receipt})
        self.consumer.send_frame(command, {"transaction": tx, **receipt})
        self._settle(held)  # (an abort gives them again, as new frames)
        if end == "abort":
            for body in bodies:
                self.places[queue].gone.add(body)
            return
        ok = end == "commit-receipted"
        for body in bodies:
            self.places[queue].sent(body, ok and self._receipted(self.producer, receipt["receipt"]))
        ok = ok and self._receipted(self.consumer, f"{tx}-end")
        for frame in held:
            self._place_of(frame).acked(frame.body.decode()[: -len(BODY_PAD)], ok)

    # -- acknowledgements

    @rule(which=st.integers(0, 3), receipted=st.booleans())
    def ack(self, which: int, receipted: bool) -> None:
        held = self._held()
        if not held:
            return
        frame = held[which % len(held)]
        receipt = {"receipt": f"ack{self.n}-{which}"} if receipted else {}
        self.n += 1
        self.consumer.ack(frame, **receipt)
        ok = receipted and self._receipted(self.consumer, receipt["receipt"])
        self._place_of(frame).acked(frame.body.decode()[: -len(BODY_PAD)], ok)
        self._settle([frame])

    @rule(which=st.integers(0, 3), receipted=st.booleans())
    def nack(self, which: int, receipted: bool) -> None:
        held = self._held()
        if not held:
            return
        frame = held[which % len(held)]
        self.n += 1
        self.consumer.nack(frame, **({"receipt": f"nack{self.n}"} if receipted else {}))
        self._settle([frame])  # it comes again, redelivered (the model's sets do not change)

    # -- durable subscriptions
    @precondition(lambda self: len(self.durables) < len(NAMES))
    @rule(name=st.sampled_from(NAMES))
    def subscribe_durably(self, name: str) -> None:
        if name in self.durables:
            return
        self._subscribe_durable(name, receipt=f"sub-{name}")
        assert self._receipted(self.consumer, f"sub-{name}")
        self.durables[name] = True
        # A new subscription owes nothing of an old one of its name; what that one held
        # may come back only if its removal was not receipted (its dequeues not yet on disk).
        self.places[f"durable:{name}"] = self.ghosts.pop(name, None) or Place()
        self.removed.pop(name, None)

    @precondition(lambda self: bool(self.durables))
    @rule(name=st.sampled_from(NAMES), receipted=st.booleans())
    def remove_durable(self, name: str, receipted: bool) -> None:
        if name not in self.durables:
            return
        held = [f for f in self._held() if f.headers["subscription"] == f"d{name}"]
        self.consumer.send_frame("UNSUBSCRIBE", {"id": f"d{name}"})
        receipt = {"receipt": f"unsub-{name}"} if receipted else {}
        self.consumer.send_frame("UNSUBSCRIBE", {"activemq.subscriptionName": name, "destination": TOPIC, **receipt})
        del self.durables[name]
        place = self.places.pop(f"durable:{name}")
        if receipted and self._receipted(self.consumer, receipt["receipt"]):
            place.gone |= place.owed | place.maybe
            place.owed, place.maybe = set(), set()
        else:
            place.maybe |= place.owed
            place.owed = set()
        self.ghosts[name] = place
        self.removed[name] = bool(receipted and self._receipted(self.consumer, receipt["receipt"]))
        self._settle(held)

    # -- the power loss
    @rule(seed=st.integers(0, 2**16), torn=st.booleans(), now=st.integers(0, 3))
    def power_loss(self, seed: int, torn: bool, now: int) -> None:
        if now:  # (a power loss at one step in four or so: traffic builds up between)
            return
        image = self.disk.cut(random.Random(seed) if torn else None)
        self.net.restart(while_down=lambda: self.disk.restore(image))
        topic = self.net.broker.destinations.get(TOPIC)
        found = {name for (_cid, name) in topic.durables} if isinstance(topic, Topic) else set()
        receipted = {name for name, ok in self.durables.items() if ok}
        assert receipted <= found, f"receipted durable subscriptions lost: {sorted(receipted - found)}"
        removed = {name for name, ok in self.removed.items() if ok}
        assert not (found & removed), f"receipted removals undone: {sorted(found & removed)}"
        self._connect_and_drain(found)

    def _connect_and_drain(self, found: set[str]) -> None:
        """Take back everything (receipted ACKs), check it against the model, start from empty."""
        self.producer = self._client(None)
        self.consumer = self._client("c")
        self.settled = set()
        for n, queue in enumerate(QUEUES):
            self.consumer.subscribe(queue, f"q{n}", "client-individual", **{"activemq.prefetchSize": "1000"})
        for name in sorted(found):
            headers = {"activemq.subscriptionName": name, "activemq.prefetchSize": "1000"}
            self.consumer.subscribe(TOPIC, f"d{name}", "client-individual", **headers)
        got: dict[str, list[str]] = {}
        for frame in self.consumer.messages():
            got.setdefault(frame.headers["subscription"], []).append(frame.body.decode()[: -len(BODY_PAD)])
        for n, queue in enumerate(QUEUES):
            self.places[queue].check(queue, got.get(f"q{n}", []))
        for name in NAMES:
            place = self.places.get(f"durable:{name}")
            if name in found and place is None:  # removed without a receipt, and back
                ghost = self.ghosts.get(name, Place())
                assert not ghost.owed, f"durable:{name}: removed and back, owing {ghost.owed}"
                place = Place()
                place.maybe = ghost.maybe
            if place is not None:
                place.check(f"durable:{name}", got.get(f"d{name}", []))
        frames = self.consumer.messages()
        for k, frame in enumerate(frames):
            self.consumer.ack(frame, receipt=f"drain{k}")
        assert len(self.consumer.frames("RECEIPT")) >= len(frames)
        for name in sorted(found):  # the model starts again with the subscriptions it had
            self.consumer.send_frame("UNSUBSCRIBE", {"id": f"d{name}"})
            if name not in self.durables:
                self.consumer.send_frame("UNSUBSCRIBE", {"activemq.subscriptionName": name, "destination": TOPIC})
        for n in range(len(QUEUES)):
            self.consumer.send_frame("UNSUBSCRIBE", {"id": f"q{n}"})
        self.consumer.received.clear()
        self.settled = set()
        self.places = {q: Place() for q in QUEUES}
        self.places.update({f"durable:{name}": Place() for name in self.durables})
        self.ghosts = {}
        self.removed = {}
        for n, queue in enumerate(QUEUES):
            self.consumer.subscribe(queue, f"q{n}", "client-individual", **{"activemq.prefetchSize": "4"})
        for name in self.durables:
            self.durables[name] = True
            self._subscribe_durable(name)


class GrowingPowerLoss(PowerLossModel):
    config = broker_config("growing")


class AckCompactionPowerLoss(PowerLossModel):
    """The growing journal writing again the acks that keep chains of files alive: one
    receipted message nobody reads, sent first, pins the oldest file, so every file of the
    traffic after it is in a chain of acks (lab 06's pathology), which compaction breaks.
    It comes back once after every power loss."""

    config = broker_config("growing", compact_acks=True)
    PINNED = "/queue/pinned"

    def __init__(self) -> None:
        super().__init__()
        self.producer.send(self.PINNED, "pin" + BODY_PAD, persistent="true", receipt="pin")
        assert self._receipted(self.producer, "pin")

    @rule(seed=st.integers(0, 2**16), torn=st.booleans(), now=st.integers(0, 3))
    def power_loss(self, seed: int, torn: bool, now: int) -> None:
        super().power_loss(seed, torn, now)
        pinned = self.net.broker.destinations.get(self.PINNED)
        assert pinned is not None and pinned.size() == 1, "the receipted message nobody reads is not back once"


class RingPowerLoss(PowerLossModel):
    config = broker_config("ring")


class UnsyncedPowerLoss(PowerLossModel):
    """``fsync = "never"``: a RECEIPT means handed to the operating system only."""

    config = broker_config("growing", fsync="never")


_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestGrowingJournalPowerLoss = GrowingPowerLoss.TestCase
TestGrowingJournalPowerLoss.settings = _SETTINGS
TestAckCompactionPowerLoss = AckCompactionPowerLoss.TestCase
TestAckCompactionPowerLoss.settings = _SETTINGS
TestRingJournalPowerLoss = RingPowerLoss.TestCase
TestRingJournalPowerLoss.settings = _SETTINGS


def test_the_checks_catch_a_broker_that_does_not_fsync() -> None:
    """Without fsync, receipted messages are lost at a power loss, and the model says so."""
    with pytest.raises(AssertionError, match="receipted and lost|receipted ACK undone|durable subscriptions lost"):
        run_state_machine_as_test(
            UnsyncedPowerLoss,
            settings=settings(_SETTINGS, max_examples=50, phases=[Phase.generate]),
        )
