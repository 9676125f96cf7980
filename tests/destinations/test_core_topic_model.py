"""Topic semantics against a model: subscribers durable or not, restarts (hypothesis).

Two producers publish, persistent or not, to one topic. Three subscriber slots
come and go: each subscribes durably (client-id ``c<slot>``, subscription
``d<slot>``) or not, in any ack mode and prefetch, acknowledges or rejects,
leaves (UNSUBSCRIBE, DISCONNECT or a dropped socket), and an offline durable
subscription may be removed. The broker restarts on its journals. The model:

- a subscription is owed every message published while it exists: a
  non-durable one while subscribed, a durable one online or offline;
- leaving ends a non-durable subscription and what it was owed; a durable one
  keeps it, unacknowledged messages included; a restart keeps what durable
  subscriptions are owed of persistent messages only (non-persistent ones
  live in memory, as in ActiveMQ);
- nothing is delivered that the subscription was not owed, nor after its ack;
  the prefetch holds; ``redelivered:true`` is set exactly on a message the
  subscription was given before; each producer's first deliveries come in
  order;
- at the end every durable subscription drains exactly what it is still owed;
- whenever a connection ends, nothing of it is left behind (``minibroker.core.invariants``).

It runs on a broker without memory limits, and on one whose non-durable
subscriptions spool what they cannot take yet to the temp store.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from delivery_checks import IndexOnDisk, check_delivery, with_index_on_disk
from minibroker.config import parse_config
from minibroker.edge import VirtualClient, VirtualNetwork
from minibroker.frames import Frame

TOPIC = "/topic/model"
SLOTS = 3
MODES = ("auto", "client", "client-individual")


class _Subscriber:
    """A slot's subscription: durable or not, and what the model expects of it."""

    def __init__(self, durable: bool) -> None:
        self.durable = durable
        self.owed: set[bytes] = set()  # published to it, not yet acknowledged
        self.given: set[bytes] = set()  # delivered to it at least once
        self.client: VirtualClient | None = None  # None: offline (a durable subscription only)
        self.mode = "auto"
        self.prefetch = 1
        self.seen = 0
        self.held: list[Frame] = []
        self.last_first: dict[str, int] = {}


class TopicModel(RuleBasedStateMachine):
    """A topic under random publishers and subscribers, checked against the model above."""

    config = parse_config(
        {
            "store": {"fsync": "never", "journal_max_file_length": "64 kb"},
            "destination_policy": [{"topic": ">", "maximum_redeliveries": -1}],
        }
    )
    durable_allowed = True

    def __init__(self) -> None:
        super().__init__()
        self.data_dir = tempfile.mkdtemp(prefix="minibroker-topic-model-")
        self.net = VirtualNetwork(self.config, data_dir=self.data_dir, check_teardown=True)
        self.producers = [self.net.connected_client(f"p{i}") for i in range(2)]
        self.next_body = 0
        self.persistent: dict[bytes, bool] = {}
        self.order: dict[bytes, tuple[str, int]] = {}
        self.slots: list[_Subscriber | None] = [None] * SLOTS

    def teardown(self) -> None:
        try:
            for slot, sub in enumerate(self.slots):
                if sub is None:
                    continue
                if sub.client is not None:
                    sub.client.drop()
                    self._take_deliveries()
                    sub.client = None
                    if not sub.durable:
                        continue
                drain = self._connect(slot)
                drain.subscribe(TOPIC, "s", "auto", **{"activemq.subscriptionName": f"d{slot}"})
                assert not drain.frames("ERROR"), drain.frames("ERROR")[0].headers.get("message")
                bodies = drain.bodies()
                assert len(bodies) == len(set(bodies)), f"d{slot} drained a message twice"
                assert set(bodies) == sub.owed, (
                    f"d{slot}: lost {sorted(sub.owed - set(bodies))[:5]}, extra {sorted(set(bodies) - sub.owed)[:5]}"
                )
                drain.drop()
        finally:
            self.net.stop()
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _connect(self, slot: int) -> VirtualClient:
        client = self.net.client(f"c{slot}")
        reply = client.connect("1.2", **{"client-id": f"c{slot}"})
        assert reply is not None and reply.command == "CONNECTED", reply
        return client

    # -- publishing
    @rule(producer=st.integers(0, 1), persistent=st.booleans(), count=st.integers(1, 3))
    def publish(self, producer: int, persistent: bool, count: int) -> None:
        for _ in range(count):
            body = f"p{producer}-{self.next_body}".encode()
            self.order[body] = (f"p{producer}", self.next_body)
            self.next_body += 1
            self.persistent[body] = persistent
            for sub in self.slots:
                if sub is not None:
                    sub.owed.add(body)
            self.producers[producer].send(TOPIC, body, **({"persistent": "true"} if persistent else {}))
        self._take_deliveries()

    # -- subscribers
    @rule(
        slot=st.integers(0, SLOTS - 1), durable=st.booleans(), mode=st.sampled_from(MODES), prefetch=st.integers(1, 3)
    )
    def subscribe(self, slot: int, durable: bool, mode: str, prefetch: int) -> None:
        sub = self.slots[slot]
        if sub is not None and sub.client is not None:
            return  # online already
        if sub is None:
            sub = self.slots[slot] = _Subscriber(durable and self.durable_allowed)
        sub.client = self._connect(slot)
        sub.mode, sub.prefetch, sub.seen, sub.held, sub.last_first = mode, prefetch, 0, [], {}
        headers = {"activemq.prefetchSize": str(prefetch)}
        if sub.durable:
            headers["activemq.subscriptionName"] = f"d{slot}"
        sub.client.subscribe(TOPIC, "s", mode, **headers)
        self._take_deliveries()

    @precondition(lambda self: any(s is not None and s.held for s in self.slots))
    @rule(slot=st.integers(0, SLOTS - 1), pick=st.integers(0, 2), nack=st.booleans())
    def settle(self, slot: int, pick: int, nack: bool) -> None:
        sub = self.slots[slot]
        if sub is None or sub.client is None or not sub.held:
            return
        message = sub.held[min(pick, len(sub.held) - 1)]
        at = sub.held.index(message)
        settled = sub.held[: at + 1] if sub.mode == "client" else [message]
        sub.held = [m for m in sub.held if m not in settled]
        if nack:
            sub.client.nack(message)
        else:
            sub.client.ack(message)
            sub.owed.difference_update(m.body for m in settled)
        self._take_deliveries()

    @rule(slot=st.integers(0, SLOTS - 1), how=st.sampled_from(["unsubscribe", "disconnect", "drop"]))
    def leave(self, slot: int, how: str) -> None:
        sub = self.slots[slot]
        if sub is None or sub.client is None:
            return
        client = sub.client
        if how == "unsubscribe":
            client.send_frame("UNSUBSCRIBE", {"id": "s"})
            self._take_deliveries()
            client.drop()
        elif how == "disconnect":
            client.disconnect()
        else:
            client.drop()
        sub.client = None
        if not sub.durable:
            self.slots[slot] = None
        self._take_deliveries()

    @rule(slot=st.integers(0, SLOTS - 1))
    def remove_durable(self, slot: int) -> None:
        """An offline durable subscription is removed (UNSUBSCRIBE naming it)."""
        sub = self.slots[slot]
        if sub is None or not sub.durable or sub.client is not None:
            return
        client = self._connect(slot)
        client.send_frame("UNSUBSCRIBE", {"activemq.subscriptionName": f"d{slot}", "destination": TOPIC})
        assert not client.frames("ERROR"), client.frames("ERROR")[0].headers.get("message")
        client.drop()
        self.slots[slot] = None

    @rule()
    def restart(self) -> None:
        """The broker stops and starts again: durable subscriptions keep their persistent messages."""
        self._take_deliveries()
        self.net.restart()
        self.producers = [self.net.connected_client(f"p{i}") for i in range(2)]
        for slot, sub in enumerate(self.slots):
            if sub is None:
                continue
            sub.client = None
            if not sub.durable:
                self.slots[slot] = None
            else:
                sub.owed = {b for b in sub.owed if self.persistent[b]}

    # -- checking every delivery against the model
    def _take_deliveries(self) -> None:
        for slot, sub in enumerate(self.slots):
            if sub is None or sub.client is None:
                continue
            errors = sub.client.frames("ERROR")
            assert not errors, f"c{slot}: {errors[0].headers.get('message')}"
            messages = sub.client.messages()
            for message in messages[sub.seen :]:
                body = message.body
                assert body in sub.owed, f"c{slot} got {body!r}, which it is not owed"
                check_delivery(f"c{slot}", message, sub.given, self.order, sub.last_first)
                if sub.mode == "auto":
                    sub.owed.discard(body)
                else:
                    sub.held.append(message)
            sub.seen = len(messages)

    @invariant()
    def every_connection_ended_cleanly(self) -> None:
        """Nothing of a subscriber's connection is left once it ended (``minibroker.core.invariants``)."""
        assert self.net.teardown is not None
        assert self.net.teardown.violations == [], self.net.teardown.violations

    @invariant()
    def deliveries_agree_with_the_model(self) -> None:
        self._take_deliveries()
        for sub in self.slots:
            if sub is not None and sub.client is not None and sub.mode != "auto":
                assert len(sub.held) <= sub.prefetch, f"holds {len(sub.held)} unacknowledged, prefetch {sub.prefetch}"


class SpoolingTopicModel(TopicModel):
    """Non-durable subscribers under a 16 kB limit: what a slow one cannot take yet spools
    to the temp store (``pending_cursor = "file"``) instead of stopping the producer."""

    config = parse_config(
        {
            "system_usage": {"memory_limit": "16 kb"},
            "store": {"fsync": "never", "journal_max_file_length": "64 kb"},
            "destination_policy": [{"topic": ">", "maximum_redeliveries": -1, "pending_cursor": "file"}],
        }
    )
    durable_allowed = False  # a durable subscription's backlog stays in memory, and would stop the producer


class DurableTopicModelWithTheIndexOnDisk(IndexOnDisk, TopicModel):
    """Durable subscriptions' persistent messages with the journal's index mostly on disk."""

    config = parse_config(
        with_index_on_disk(
            {
                "store": {"fsync": "never", "journal_max_file_length": "64 kb"},
                "destination_policy": [{"topic": ">", "maximum_redeliveries": -1}],
            }
        )
    )


_SETTINGS = settings(
    max_examples=100, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestTopicWithDurableSubscriptions = TopicModel.TestCase
TestTopicWithDurableSubscriptions.settings = _SETTINGS
TestTopicSpoolingToTheTempStore = SpoolingTopicModel.TestCase
TestTopicSpoolingToTheTempStore.settings = _SETTINGS
TestDurableTopicWithTheIndexOnDisk = DurableTopicModelWithTheIndexOnDisk.TestCase
TestDurableTopicWithTheIndexOnDisk.settings = _SETTINGS
