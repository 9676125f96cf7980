"""The core's fast paths make exactly what the general paths make.

The fast paths that stay (each measured on the compiled core, ``docs/benchmarks.md``):

- a topic's straight-through delivery: a message to an auto-ack subscription with room
  skips the memory charge that would be released in the same call
  (``Topic._straight_through``, ``Usage.passes``);
- the codec's one-step read of runs of whole plain frames (``FrameParser._whole_frames``);
- a MESSAGE's header block made from its SEND's lines (``message.send_block``), and the
  layouts of those lines kept (``_kept_layout``).

Here the same generated workload (producers, consumers of
every ack mode with small prefetches and sockets that fill, selectors,
persistent and expiring messages, memory limits small enough to cross a percent
band with every message and to block producers, traced or not) runs on two
brokers, one with the fast paths turned off, and after every step both must
show the same: every frame each client got, every statistic, every usage and
its peak, and the trace.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.config import parse_config
from minibroker.destinations import Topic
from minibroker.destinations import topic as topic_module
from minibroker.edge import VirtualClient, VirtualNetwork
from minibroker.protocol import codec as codec_module
from minibroker.protocol import message as message_module

#: The destinations of one example: queues, a topic, or both.
_DESTINATIONS = st.sampled_from([["/queue/a", "/queue/b"], ["/topic/t"], ["/queue/a", "/queue/a", "/topic/t"]])
#: Actions name a destination by a number: its place in the example's list (modulo its length).
_DESTINATION = st.integers(0, 2)
_PRODUCERS = 2
_CONSUMERS = 3

_SEND = st.tuples(
    st.just("send"),
    st.integers(0, _PRODUCERS - 1),
    _DESTINATION,
    st.booleans(),  # persistent
    st.sampled_from([0, 0, 0, 1500]),  # time to live, ms
    st.sampled_from([0, 10, 300, 3000]),  # body bytes
    st.sampled_from([None, "a", "b"]),  # a "kind" header for selectors
    st.booleans(),  # a receipt
    st.sampled_from([1, 1, 5, 30]),  # how many
)
_SUBSCRIBE = st.tuples(
    st.just("subscribe"),
    st.integers(0, _CONSUMERS - 1),
    _DESTINATION,
    st.sampled_from(["auto", "auto", "client", "client-individual"]),
    st.sampled_from(["1", "2", "1000"]),  # prefetch
    st.sampled_from([None, None, None, "kind = 'a'"]),
)
_OTHERS = {
    "subscribe": _SUBSCRIBE,
    "unsubscribe": st.tuples(st.just("unsubscribe"), st.integers(0, _CONSUMERS - 1), _DESTINATION),
    "ack": st.tuples(st.just("ack"), st.integers(0, _CONSUMERS - 1)),
    "read": st.tuples(st.just("read"), st.integers(0, _CONSUMERS - 1)),
    "advance": st.tuples(st.just("advance"), st.sampled_from([0.2, 2.0])),
    "reconnect": st.tuples(st.just("reconnect"), st.integers(0, _CONSUMERS - 1)),
}
#: Mostly sends; consumers that read and acknowledge; now and then a change of consumers.
_ACTION = st.sampled_from(["send"] * 6 + ["read", "read", "ack", "ack", "advance"] + list(_OTHERS)).flatmap(
    lambda kind: _SEND if kind == "send" else _OTHERS[kind]
)


#: Each fast path's switch: (module, name).
_SWITCHES = [
    (topic_module, "STRAIGHT_THROUGH"),
    (codec_module, "WHOLE_FRAMES"),
    (message_module, "SEND_BLOCK"),
    (message_module, "LAYOUT_CACHE"),
]


@contextlib.contextmanager
def _general_paths_only() -> Iterator[None]:
    saved = [getattr(module, name) for module, name in _SWITCHES]
    for module, name in _SWITCHES:
        setattr(module, name, False)
    try:
        yield
    finally:
        for (module, name), value in zip(_SWITCHES, saved, strict=True):
            setattr(module, name, value)


class _World:
    """One broker on the virtual network, its producers and consumers, and what each
    consumer has received but not yet acknowledged."""

    def __init__(
        self, config: Any, data_dir: str | None, traced: bool, small_buffers: bool, destinations: list[str]
    ) -> None:
        self.destinations = destinations
        self.net = VirtualNetwork(config, trace=True if traced else None, data_dir=data_dir)
        self.producers = [self.net.connected_client(f"p{i}") for i in range(_PRODUCERS)]
        self.small_buffers = small_buffers
        self.consumers = [self._consumer(i) for i in range(_CONSUMERS)]
        self.unacked: list[list[Any]] = [[] for _ in range(_CONSUMERS)]
        self.seen = [0] * _CONSUMERS
        #: Each consumer's subscriptions (by destination, which is also the id).
        self.subscribed: list[set[str]] = [set() for _ in range(_CONSUMERS)]

    def _consumer(self, i: int) -> VirtualClient:
        client = self.net.connected_client(f"c{i}")
        if self.small_buffers:  # its socket fills: the broker is told it is not writable
            client.recv_buffer, client.auto_read = 2000, False
        return client

    def apply(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "send":
            _, p, d, persistent, ttl, size, sort, receipt, count = action
            dest = self.destinations[d % len(self.destinations)]
            headers = {}
            if persistent:
                headers["persistent"] = "true"
            if ttl:
                headers["expires"] = str(self.net.clock.wall_ms() + ttl)
            if sort is not None:
                headers["kind"] = sort
            if receipt:
                headers["receipt"] = "r"
            producer = self.producers[p]
            for _ in range(count):
                if not producer.closed and not producer.reading_paused:
                    producer.send(dest, b"x" * size, **headers)
        elif kind == "subscribe":
            _, c, d, ack, prefetch, selector = action
            dest = self.destinations[d % len(self.destinations)]
            headers = {"activemq.prefetchSize": prefetch}
            if selector is not None:
                headers["selector"] = selector
            if dest not in self.subscribed[c]:
                self.subscribed[c].add(dest)
                self._consumer_frame(c, lambda client: client.subscribe(dest, dest, ack, **headers))
        elif kind == "unsubscribe":
            _, c, d = action
            dest = self.destinations[d % len(self.destinations)]
            if dest in self.subscribed[c]:
                self.subscribed[c].discard(dest)
                self._consumer_frame(c, lambda client: client.send_frame("UNSUBSCRIBE", {"id": dest}))
        elif kind == "ack":
            self._collect(action[1])
            pending, self.unacked[action[1]] = self.unacked[action[1]], []
            for message in pending:
                self._consumer_frame(action[1], lambda client, message=message: client.ack(message))
        elif kind == "read":
            self.consumers[action[1]].read()
            self._collect(action[1])
        elif kind == "advance":
            self.net.advance(action[1])
        elif kind == "reconnect":
            c = action[1]
            self.consumers[c].drop()
            self.consumers[c] = self._consumer(c)
            self.unacked[c], self.seen[c], self.subscribed[c] = [], 0, set()

    def _consumer_frame(self, c: int, send: Any) -> None:
        client = self.consumers[c]
        if not client.closed:
            send(client)

    def _collect(self, c: int) -> None:
        """The MESSAGEs consumer ``c`` read since last time that ask for an ACK."""
        received = self.consumers[c].received
        for frame in received[self.seen[c] :]:
            if frame.command == "MESSAGE" and "ack" in frame.headers:
                self.unacked[c].append(frame)
        self.seen[c] = len(received)

    def observed(self) -> dict[str, Any]:
        """Everything the two brokers must agree on."""
        broker = self.net.broker
        clients = [*self.producers, *self.consumers]
        usages = [broker.memory, broker.store_usage, broker.temp_usage]
        destinations = {}
        for address, d in sorted(broker.destinations.items()):
            usages.append(d.memory)
            destinations[address] = (
                d.enqueued,
                d.dequeued,
                d.dispatched,
                d.expired,
                d.discarded,
                d.size(),
                [(s.id, s.delivered_count, s.acked_count, len(s.dispatched), len(s.pending)) for s in d.subscriptions]
                if isinstance(d, Topic)
                else [(s.id, s.delivered_count, s.acked_count, len(s.dispatched)) for s in d.subscriptions],
            )
        return {
            "received": [[(f.command, dict(f.headers), f.body) for f in c.received] for c in clients],
            "unread": [bytes(c.inbound) for c in clients],
            "closed": [c.closed for c in clients],
            "paused": [c.reading_paused for c in clients],
            "usages": [(u.name, u.usage, u.peak, u.percent) for u in usages],
            "destinations": destinations,
            "flow": (len(broker.flow.blocked), broker.flow.retry),
            "trace": broker.trace.events() if hasattr(broker.trace, "events") else None,
        }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    subscriptions=st.lists(_SUBSCRIBE, max_size=4),
    actions=st.lists(_ACTION, min_size=10, max_size=40),
    destinations=_DESTINATIONS,
    memory=st.sampled_from(["24 kb", "200 kb", "64 mb"]),
    cursor=st.sampled_from(["vm", "file"]),
    journal=st.booleans(),
    traced=st.booleans(),
    small_buffers=st.booleans(),
)
def test_the_fast_paths_do_what_the_general_paths_do(
    subscriptions: list[tuple[Any, ...]],
    actions: list[tuple[Any, ...]],
    destinations: list[str],
    memory: str,
    cursor: str,
    journal: bool,
    traced: bool,
    small_buffers: bool,
) -> None:
    config = parse_config(
        {
            "system_usage": {"memory_limit": memory},
            "destination_policy": [
                {"queue": ">", "pending_cursor": cursor, "expire_messages_period": 1000},
                {"topic": ">", "pending_cursor": cursor},
            ],
        }
    )
    dirs = [tempfile.mkdtemp(prefix="minibroker-fast-") for _ in range(2)] if journal else [None, None]
    try:
        fast = _World(config, dirs[0], traced, small_buffers, destinations)
        with _general_paths_only():
            general = _World(config, dirs[1], traced, small_buffers, destinations)
        assert fast.observed() == general.observed()
        for action in [*subscriptions, *actions]:
            fast.apply(action)
            with _general_paths_only():
                general.apply(action)
            assert fast.observed() == general.observed(), action
    finally:
        for d in dirs:
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)


def test_a_message_to_waiting_auto_subscribers_charges_no_memory_but_its_peak() -> None:
    """The straight-through path is the one taken by the usual message: the broker's and
    the topic's usage never move, their peaks do, and every subscriber gets the message."""
    net = VirtualNetwork()
    consumers = [net.connected_client(f"c{i}") for i in range(2)]
    for consumer in consumers:
        consumer.subscribe("/topic/t")
    producer = net.connected_client("p")
    broker = net.broker
    producer.send("/topic/t", b"x" * 100)
    topic = broker.destinations["/topic/t"]
    assert [consumer.bodies() for consumer in consumers] == [[b"x" * 100]] * 2
    assert (broker.memory.usage, topic.memory.usage) == (0, 0)
    assert broker.memory.peak == topic.memory.peak > 1100
    assert (topic.enqueued, topic.dispatched, topic.dequeued) == (1, 2, 2)


def test_the_switches_are_read_where_the_fast_paths_run() -> None:
    """Turned off, the switches send the work to the general paths (no layout is worked out,
    none kept), and a SEND still reaches its consumer: the comparison above compares two paths."""
    message_module._LAYOUTS.clear()
    net = VirtualNetwork()
    consumer = net.connected_client("c")
    consumer.subscribe("/queue/a")
    producer = net.connected_client("p")
    with _general_paths_only():
        producer.send("/queue/a", b"one", kind="a")
    assert consumer.bodies() == [b"one"] and not message_module._LAYOUTS
    producer.send("/queue/a", b"two", kind="a")
    assert consumer.bodies() == [b"one", b"two"] and message_module._LAYOUTS
