"""Queue semantics against a model, under any interleaving (hypothesis state machines).

Two producers send to one queue while consumers come and go: each subscribes
with an ack mode and a prefetch of its own, acknowledges or rejects what it
holds, unsubscribes, disconnects or drops its socket. After every step the
broker must agree with a model of what a queue promises:

- nothing is delivered that was not sent, and nothing acknowledged comes back;
- a consumer in a client mode never holds more than its prefetch, and one with a
  selector gets only what it selects; while exclusive consumers are there, only
  one of them receives (the highest ``activemq.priority``, the first among equals);
- without one, a consumer gets a message only if no consumer of a higher
  priority could take it (one that selects it and is not full);
- a message delivered again carries ``redelivered:true``, a first delivery does not;
- no message is delivered after it expired (virtual time moves on too);
- each consumer sees every producer's first deliveries in the order they were sent;
- transactions: a transacted send enters the queue (and the order) at COMMIT and
  never after ABORT; a transacted ack takes effect at COMMIT, and after ABORT
  the message is delivered again;
- a SEND parked by producer flow control (no RECEIPT yet) may be lost to a
  restart, as it was never acknowledged; at the end none is still parked;
- at the end, a last consumer drains exactly the messages not yet consumed,
  each once: nothing is lost or duplicated (with persistent messages, across
  restarts of the broker too).

A consumer's connection may also browse the queue (``browser:true``: it sees
only messages sent and not consumed, and consumes none of them) and use a
temporary queue of its own. Whenever a connection ends, nothing of it is left
behind (``minibroker.core.invariants``: no subscription, unacknowledged message,
transaction, temporary queue or flow-control wait; what it held is back on the
queue).

The same machine runs on a broker that keeps everything in memory, and on three
whose 16 kB memory limit makes the cursors page: persistent messages
out to the journal and back in (the store cursor), non-persistent ones to the
temp store (the file cursor), and persistent ones through the store cursor of a
queue that orders by priority (first deliveries then keep each producer's order
within a priority). Paging must change none of it.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from delivery_checks import IndexOnDisk, check_delivery, with_index_on_disk
from minibroker.config import BrokerConfig, parse_config
from minibroker.edge import VirtualClient, VirtualNetwork
from minibroker.frames import Frame

QUEUE = "/queue/model"
SLOTS = 3
MODES = ("auto", "client", "client-individual")
COLORS = ("red", "blue")


class _Consumer:
    """One consumer in the model: its client, mode, prefetch and what it holds unacknowledged."""

    def __init__(self, client: VirtualClient, mode: str, prefetch: int) -> None:
        self.client = client
        self.mode = mode
        self.prefetch = prefetch
        self.seen = 0  # MESSAGE frames already checked
        self.held: list[Frame] = []  # delivered, not yet acknowledged, in delivery order
        self.tx: list[bytes] | None = None  # in an open transaction: the bodies it acknowledged
        self.last_first_delivery: dict[str, int] = {}  # producer -> last index delivered for the first time
        self.selects: str | None = None  # the color its selector takes, if it has one
        self.exclusive = False
        self.priority = 0  # activemq.priority
        self.serial = 0  # the order consumers came in
        self.gone = False  # unsubscribed: still listed while its last deliveries are taken
        self.temp_subscribed = False  # consumes from a temporary queue of its own too


class QueueModel(RuleBasedStateMachine):
    """A queue under random producers and consumers, checked against the model above."""

    # Redelivered without limit: a message past maximum_redeliveries leaves for the DLQ,
    # which the dead-letter tests cover; here every message must stay in the queue.
    config: BrokerConfig = parse_config({"destination_policy": [{"queue": ">", "maximum_redeliveries": -1}]})
    persistent = False
    prioritized = False  # the queue dispatches higher priorities first: order holds per producer and priority
    on_disk = False  # a data directory: journals, and the temp store for spilled messages

    def __init__(self) -> None:
        super().__init__()
        self.data_dir = tempfile.mkdtemp(prefix="minibroker-model-") if self.on_disk else None
        self.net = VirtualNetwork(self.config, data_dir=self.data_dir, check_teardown=True)
        self.producers = [self.net.connected_client(f"p{i}") for i in range(2)]
        # body -> (its order: the producer, and its priority where the queue orders by it; its place there)
        self.sent: dict[bytes, tuple[str, int]] = {}
        self.next_index: dict[str, int] = {}
        self.priority: dict[bytes, int] = {}
        self.color: dict[bytes, str] = {}  # a header some consumers select on
        self.expires: dict[bytes, int] = {}  # body -> expiry (ms since the epoch on the virtual clock); 0: never
        # receipt id -> the bodies it confirms. A SEND parked by producer flow control has no
        # RECEIPT yet: a restart may lose it (it was never acknowledged), nothing else may.
        self.unconfirmed: dict[str, list[bytes]] = {}
        self.receipts_read = [0, 0]
        self.operation_started = self.net.clock.wall_ms()
        self.next_body = 0
        self.producer_tx: list[list[bytes] | None] = [None, None]  # sends held by an open transaction
        self.consumed: set[bytes] = set()
        self.delivered: set[bytes] = set()
        self.consumers: list[_Consumer | None] = [None] * SLOTS
        self.serial = 0
        self.browses = 0

    def teardown(self) -> None:
        try:
            for slot in range(SLOTS):
                if self.consumers[slot] is not None:
                    self.drop(slot)
                    self._take_deliveries()  # what it held may have gone to another consumer
            drain = self.net.connected_client("drain")
            drain.subscribe(QUEUE, "drain", "auto")
            self._no_errors(drain)
            bodies = drain.bodies()
            self._confirm()
            assert not self.unconfirmed, f"SENDs still parked after the drain: {sorted(self.unconfirmed)[:5]}"
            assert len(bodies) == len(set(bodies)), "the drain got a message twice"
            assert not set(bodies) & self.consumed, "a consumed message came back"
            now = self.net.clock.wall_ms()
            expired = {b for b in self.sent if 0 < self.expires[b] <= now}
            assert not set(bodies) & expired, f"drained expired messages: {sorted(set(bodies) & expired)[:5]}"
            assert set(bodies) | self.consumed | expired == set(self.sent), (
                f"lost: {sorted(set(self.sent) - self.consumed - expired - set(bodies))[:5]}"
            )
        finally:
            self.net.stop()
            if self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- producers
    def _enters_queue(self, producer: int, body: bytes) -> None:
        """``body`` is in the queue now (sent, or its transaction committed): its place in the order."""
        order = f"p{producer}/priority {self.priority[body]}" if self.prioritized else f"p{producer}"
        self.sent[body] = (order, self.next_index.get(order, 0))
        self.next_index[order] = self.sent[body][1] + 1

    @rule(
        producer=st.integers(0, 1),
        count=st.integers(1, 4),
        priority=st.integers(0, 9),
        ttl=st.sampled_from([0, 0, 0, 100, 1000]),
        color=st.sampled_from(COLORS),
    )
    def send(self, producer: int, count: int, priority: int, ttl: int, color: str) -> None:
        tx = self.producer_tx[producer]
        for _ in range(count):
            body = f"p{producer}-{self.next_body}".encode()
            self.next_body += 1
            self.priority[body] = priority
            self.color[body] = color
            self.expires[body] = self.net.clock.wall_ms() + ttl if ttl else 0
            headers = {"priority": str(priority), "color": color}
            if ttl:
                headers["expires"] = str(self.expires[body])
            if self.persistent:
                headers["persistent"] = "true"
            if tx is not None:
                headers["transaction"] = f"tx-p{producer}"
                tx.append(body)
            else:
                headers["receipt"] = body.decode()
                self.unconfirmed[headers["receipt"]] = [body]
            self.producers[producer].send(QUEUE, body, **headers)
            if tx is None:
                self._enters_queue(producer, body)
        self._take_deliveries()

    @rule(producer=st.integers(0, 1), commit=st.booleans())
    def producer_transaction(self, producer: int, commit: bool) -> None:
        """BEGIN a transaction, or end the open one: COMMIT (its sends enter the queue) or ABORT."""
        client, tx = self.producers[producer], self.producer_tx[producer]
        if tx is None:
            client.send_frame("BEGIN", {"transaction": f"tx-p{producer}"})
            self.producer_tx[producer] = []
            return
        if commit:
            receipt = f"commit-{self.next_body}-p{producer}"
            self.unconfirmed[receipt] = list(tx)
            client.send_frame("COMMIT", {"transaction": f"tx-p{producer}", "receipt": receipt})
            for body in tx:
                self._enters_queue(producer, body)
        else:
            client.send_frame("ABORT", {"transaction": f"tx-p{producer}"})
        self.producer_tx[producer] = None
        self._take_deliveries()

    # -- consumers
    @rule(
        slot=st.integers(0, SLOTS - 1),
        mode=st.sampled_from(MODES),
        prefetch=st.integers(1, 3),
        selects=st.sampled_from([None, None, *COLORS]),
        exclusive=st.sampled_from([False, False, False, True]),
        priority=st.sampled_from([0, 0, 5]),
    )
    def subscribe(
        self, slot: int, mode: str, prefetch: int, selects: str | None, exclusive: bool, priority: int
    ) -> None:
        """A consumer comes: with a selector on the ``color`` header or none, exclusive
        or not, with a consumer priority (``activemq.priority``) or the default 0."""
        if self.consumers[slot] is not None:
            return
        self.serial += 1
        client = self.net.connected_client(f"c{self.serial}")
        consumer = _Consumer(client, mode, prefetch)
        consumer.selects, consumer.exclusive, consumer.priority, consumer.serial = (
            selects,
            exclusive,
            priority,
            self.serial,
        )
        self.consumers[slot] = consumer
        headers = {"activemq.prefetchSize": str(prefetch), "activemq.priority": str(priority)}
        if exclusive:
            headers["activemq.exclusive"] = "true"
        if selects is not None:
            headers["selector"] = f"color = '{selects}'"
        client.subscribe(QUEUE, "s", mode, **headers)
        self._take_deliveries()

    def _held(self, slot: int) -> _Consumer | None:
        consumer = self.consumers[slot]
        return consumer if consumer is not None and consumer.held else None

    @precondition(lambda self: any(c is not None and c.held for c in self.consumers))
    @rule(slot=st.integers(0, SLOTS - 1), pick=st.integers(0, 2), nack=st.booleans())
    def settle(self, slot: int, pick: int, nack: bool) -> None:
        consumer = self._held(slot)
        if consumer is None:
            return
        message = consumer.held[min(pick, len(consumer.held) - 1)]
        at = consumer.held.index(message)
        settled = consumer.held[: at + 1] if consumer.mode == "client" else [message]
        consumer.held = [m for m in consumer.held if m not in settled]
        headers = {"transaction": "tx-c"} if consumer.tx is not None else {}
        if nack:
            consumer.client.nack(message, **headers)
        else:
            consumer.client.ack(message, **headers)
            if consumer.tx is None:
                self.consumed.update(m.body for m in settled)
            else:
                consumer.tx.extend(m.body for m in settled)
        self._take_deliveries()

    @rule(slot=st.integers(0, SLOTS - 1), commit=st.booleans())
    def consumer_transaction(self, slot: int, commit: bool) -> None:
        """BEGIN a transaction for acks, or end the open one: COMMIT (its acks take effect)
        or ABORT (what it acknowledged or rejected is delivered again)."""
        consumer = self.consumers[slot]
        if consumer is None:
            return
        if consumer.tx is None:
            consumer.client.send_frame("BEGIN", {"transaction": "tx-c"})
            consumer.tx = []
            return
        consumer.client.send_frame("COMMIT" if commit else "ABORT", {"transaction": "tx-c"})
        if commit:
            self.consumed.update(consumer.tx)
        consumer.tx = None
        self._take_deliveries()

    @rule(slot=st.integers(0, SLOTS - 1), leave=st.sampled_from(["unsubscribe", "stay"]))
    def browse(self, slot: int, leave: str) -> None:
        """A consumer's connection browses the queue too: it sees only messages sent
        and not consumed, consumes none of them, and may stay subscribed as a browser."""
        consumer = self.consumers[slot]
        if consumer is None:
            return
        self._take_deliveries()
        self.browses += 1
        sub_id = f"b{self.browses}"
        client = consumer.client
        before = len(client.messages())
        client.subscribe(QUEUE, sub_id, "auto", browser="true")
        browsed = [m for m in client.messages()[before:] if m.headers.get("subscription") == sub_id]
        now = self.net.clock.wall_ms()
        for message in browsed:
            if message.headers.get("browser") == "end":
                continue
            body = message.body
            assert body in self.sent, f"browsed {body!r}, never sent"
            assert body not in self.consumed, f"browsed {body!r}, which was consumed"
            assert not self.expires[body] or self.expires[body] > now, f"browsed {body!r}, expired"
        if leave == "unsubscribe":
            client.send_frame("UNSUBSCRIBE", {"id": sub_id})
        self._take_deliveries()

    @rule(slot=st.integers(0, SLOTS - 1), subscribe=st.booleans())
    def temp_queue(self, slot: int, subscribe: bool) -> None:
        """A consumer's connection sends to a temporary queue of its own (and may consume
        from it): when the connection ends, the temporary queue goes with its messages."""
        consumer = self.consumers[slot]
        if consumer is None:
            return
        client = consumer.client
        if subscribe and not consumer.temp_subscribed:
            client.subscribe("/temp-queue/own", "t", "client-individual")
            consumer.temp_subscribed = True
        client.send("/temp-queue/own", b"to myself", receipt="own")  # a receipt: flow control never stops reading it
        self._take_deliveries()

    @rule(slot=st.integers(0, SLOTS - 1), how=st.sampled_from(["unsubscribe", "disconnect", "drop"]))
    def leave(self, slot: int, how: str) -> None:
        consumer = self.consumers[slot]
        if consumer is None:
            return
        if how == "unsubscribe":
            consumer.exclusive, consumer.gone = False, True  # gone from the queue's consumers: another may take over
            consumer.client.send_frame("UNSUBSCRIBE", {"id": "s"})
            self._take_deliveries()  # nothing more may arrive for it
            consumer.client.drop()
        elif how == "disconnect":
            consumer.client.disconnect()
        else:
            consumer.client.drop()
        self.consumers[slot] = None
        self._take_deliveries()

    @rule(ms=st.sampled_from([10, 150, 1500]))
    def time_passes(self, ms: int) -> None:
        """Virtual time moves on: messages expire (and timers run)."""
        self._take_deliveries()
        self.operation_started = self.net.clock.wall_ms()
        self.net.advance(ms / 1000)
        self._take_deliveries()  # delivered during the advance: not expired when it began
        self.operation_started = self.net.clock.wall_ms()

    @precondition(lambda self: self.persistent)
    @rule()
    def restart(self) -> None:
        """The broker stops and starts again on its journals: every client is cut off."""
        self._take_deliveries()
        self.net.restart()  # open transactions die with their connections, and parked SENDs
        for bodies in self.unconfirmed.values():
            for body in bodies:
                del self.sent[body]
        self.unconfirmed.clear()
        self.receipts_read = [0, 0]
        self.consumers = [None] * SLOTS
        self.producers = [self.net.connected_client(f"p{i}") for i in range(2)]
        self.producer_tx = [None, None]

    def drop(self, slot: int) -> None:
        consumer = self.consumers[slot]
        assert consumer is not None
        consumer.client.drop()
        self.consumers[slot] = None

    # -- checking every delivery against the model
    def _no_errors(self, client: VirtualClient) -> None:
        errors = client.frames("ERROR")
        assert not errors, f"{client.name}: {errors[0].headers.get('message')}"

    def _confirm(self) -> None:
        """Take the producers' RECEIPTs: what they confirm is in the queue for good."""
        for i, producer in enumerate(self.producers):
            self._no_errors(producer)
            receipts = producer.frames("RECEIPT")
            for receipt in receipts[self.receipts_read[i] :]:
                self.unconfirmed.pop(receipt.headers["receipt-id"], None)
            self.receipts_read[i] = len(receipts)

    def _exclusive_owner(self) -> _Consumer | None:
        """The exclusive consumer that alone receives: the highest priority, the first to come among equals."""
        exclusives = [c for c in self.consumers if c is not None and c.exclusive]
        return min(exclusives, key=lambda c: (-c.priority, c.serial), default=None)

    def _take_deliveries(self) -> None:
        self._confirm()
        owner = self._exclusive_owner()
        arrived: list[tuple[_Consumer, list[Frame]]] = []
        for consumer in self.consumers:
            if consumer is None:
                continue
            self._no_errors(consumer.client)
            messages = [m for m in consumer.client.messages() if m.headers.get("subscription") == "s"]
            before = consumer.seen
            assert owner in (None, consumer) or len(messages) == consumer.seen, (
                f"{consumer.client.name} received while {owner.client.name if owner else ''} is the exclusive consumer"
            )
            for message in messages[consumer.seen :]:
                body = message.body
                assert body in self.sent, f"delivered {body!r}, never sent"
                assert body not in self.consumed, f"{body!r} was acknowledged, and came back"
                assert consumer.selects in (None, self.color[body]), (
                    f"{consumer.client.name} selects {consumer.selects}, got a {self.color[body]} message"
                )
                expires = self.expires[body]
                assert not expires or expires > self.operation_started, f"{body!r} delivered after it expired"
                check_delivery(consumer.client.name, message, self.delivered, self.sent, consumer.last_first_delivery)
                if consumer.mode == "auto":
                    self.consumed.add(body)
                else:
                    consumer.held.append(message)
            consumer.seen = len(messages)
            arrived.append((consumer, messages[before:]))
        if owner is None:  # once every consumer's holdings are up to date
            for consumer, new in arrived:
                self._check_priority(consumer, new)

    def _check_priority(self, consumer: _Consumer, new: list[Frame]) -> None:
        """What ``consumer`` just got, no consumer of a higher ``activemq.priority`` could
        take: it selects otherwise, or it is full (an auto-ack consumer never is)."""
        for message in new:
            color = self.color[message.body]
            for other in self.consumers:
                if (
                    other is None
                    or other is consumer
                    or other.gone
                    or other.priority <= consumer.priority
                    or other.selects not in (None, color)
                ):
                    continue
                assert other.mode != "auto" and len(other.held) >= other.prefetch, (
                    f"{consumer.client.name} (priority {consumer.priority}) got {message.body!r} while "
                    f"{other.client.name} (priority {other.priority}) could take it"
                )

    @invariant()
    def every_connection_ended_cleanly(self) -> None:
        assert self.net.teardown is not None
        assert self.net.teardown.violations == [], self.net.teardown.violations

    @invariant()
    def deliveries_agree_with_the_model(self) -> None:
        self._take_deliveries()
        for consumer in self.consumers:
            if consumer is not None and consumer.mode != "auto":
                assert len(consumer.held) <= consumer.prefetch, (
                    f"{consumer.client.name} holds {len(consumer.held)} unacknowledged, prefetch {consumer.prefetch}"
                )


_SETTINGS = settings(
    max_examples=100, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_LIMITED = {
    "system_usage": {"memory_limit": "16 kb"},
    "store": {"fsync": "never", "journal_max_file_length": "64 kb"},
    "destination_policy": [{"queue": ">", "maximum_redeliveries": -1}],
}


class PagingQueueModel(QueueModel):
    """The same, persistent, under a memory limit that makes the store cursor page."""

    config = parse_config(_LIMITED)
    persistent = True
    on_disk = True


class SpillingQueueModel(QueueModel):
    """The same, non-persistent, under the same limit: the file cursor spills to the temp store."""

    config = parse_config(
        {**_LIMITED, "destination_policy": [{"queue": ">", "maximum_redeliveries": -1, "pending_cursor": "file"}]}
    )
    on_disk = True


class PriorityPagingQueueModel(PagingQueueModel):
    """Through the store cursor with ``prioritized_messages``: its index keeps one FIFO per priority."""

    config = parse_config(
        {**_LIMITED, "destination_policy": [{"queue": ">", "maximum_redeliveries": -1, "prioritized_messages": True}]}
    )
    prioritized = True


class SpilledIndexQueueModel(IndexOnDisk, PagingQueueModel):
    """Through the store cursor with the index mostly on disk (``IndexOnDisk``)."""

    config = parse_config(with_index_on_disk(_LIMITED))


class SpillingQueueModelWithTheIndexOnDisk(IndexOnDisk, SpillingQueueModel):
    """Non-persistent messages spilled to the temp store, their cursor's FIFO in chunks of 3 on disk."""


TestQueueInMemory = QueueModel.TestCase
TestQueueInMemory.settings = _SETTINGS
TestQueueThroughTheStoreCursor = PagingQueueModel.TestCase
TestQueueThroughTheStoreCursor.settings = _SETTINGS
TestQueueThroughTheTempStore = SpillingQueueModel.TestCase
TestQueueThroughTheTempStore.settings = _SETTINGS
TestPriorityQueueThroughTheStoreCursor = PriorityPagingQueueModel.TestCase
TestPriorityQueueThroughTheStoreCursor.settings = _SETTINGS
TestQueueWithTheIndexOnDisk = SpilledIndexQueueModel.TestCase
TestQueueWithTheIndexOnDisk.settings = _SETTINGS
TestSpillingQueueWithTheIndexOnDisk = SpillingQueueModelWithTheIndexOnDisk.TestCase
TestSpillingQueueWithTheIndexOnDisk.settings = _SETTINGS
