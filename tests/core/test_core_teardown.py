"""A connection's end always completes, and leaves nothing behind.

However a connection ends, its subscriptions leave their destinations, what it
held unacknowledged goes back to its queue, its transactions are rolled back
and its temporary destinations removed; ``invariants.TeardownChecker`` checks
all of it after every close. A step of the close that fails does not stop the
steps after it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker_support import patches_a_core_object
from minibroker.config import BrokerConfig, parse_config
from minibroker.core import TeardownChecker
from minibroker.edge import VirtualClient, VirtualNetwork
from minibroker.frames import Frame
from minibroker.protocol import encode


def _checked_network() -> tuple[VirtualNetwork, TeardownChecker]:
    net = VirtualNetwork(check_teardown=True)
    assert net.teardown is not None
    return net, net.teardown


def _bodies(client: VirtualClient) -> list[bytes]:
    """The bodies of the MESSAGEs it got, without a browser's ``browser:end``."""
    return [m.body for m in client.messages() if "browser" not in m.headers]


def _browser_then_consumer(net: VirtualNetwork) -> VirtualClient:
    """A connection that browses one queue, consumes five messages of another
    client-individual without acknowledging them, holds an open transaction
    with an ACK in it, and owns a temporary queue."""
    producer = net.connected_client("producer")
    for i in range(3):
        producer.send("/queue/browsed", f"b{i}")
    for i in range(7):
        producer.send("/queue/work", f"w{i}")
    c = net.connected_client("c")
    c.subscribe("/queue/browsed", "b", "auto", browser="true")
    c.subscribe("/queue/work", "w", "client-individual", **{"activemq.prefetchSize": "6"})
    c.send_frame("BEGIN", {"transaction": "t"})
    sixth = c.messages()[-1]
    c.ack(sixth, transaction="t")
    c.send("/temp-queue/replies", "to myself")
    assert not c.frames("ERROR"), c.frames("ERROR")
    assert _bodies(c) == [b"b0", b"b1", b"b2"] + [f"w{i}".encode() for i in range(6)]
    return c


@pytest.mark.parametrize("how", ["disconnect", "drop", "error"])
def test_a_browser_beside_a_consumer_leaves_nothing_behind(how: str) -> None:
    net, checker = _checked_network()
    c = _browser_then_consumer(net)
    if how == "disconnect":
        c.disconnect()
    elif how == "drop":
        c.drop()
    else:
        c.send_frame("NOT-A-COMMAND")
    assert c.closed
    work = net.broker.destinations["/queue/work"]
    browsed = net.broker.destinations["/queue/browsed"]
    assert work.consumers == [] and browsed.consumers == []  # no ghost consumer
    assert not [a for a in net.broker.destinations if a.startswith("/remote-temp-queue/")]
    assert checker.violations == [] and checker.checked == 1

    after = net.connected_client("after")
    after.subscribe("/queue/work", "w", "client-individual")
    assert sorted(after.bodies()) == [f"w{i}".encode() for i in range(7)]  # the six held come back, and the last
    browser = net.connected_client("browser")
    browser.subscribe("/queue/browsed", "b", "auto", browser="true")
    assert _bodies(browser) == [b"b0", b"b1", b"b2"]  # browsing consumed nothing


def test_unsubscribing_a_browser_is_not_an_error() -> None:
    net, checker = _checked_network()
    c = _browser_then_consumer(net)
    c.send_frame("UNSUBSCRIBE", {"id": "b", "receipt": "u"})
    assert [f.command for f in c.frames() if f.command in ("RECEIPT", "ERROR")] == ["RECEIPT"]
    c.disconnect()
    assert checker.violations == []


@patches_a_core_object
def test_a_failing_step_does_not_stop_the_rest_of_the_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam: one queue's removal of a subscription raises (as a bug would). The
    close still removes the other subscription, rolls the transaction back, drops the
    temporary queue, and the checker names the step that failed."""
    net, checker = _checked_network()
    c = _browser_then_consumer(net)
    browsed = net.broker.destinations["/queue/browsed"]

    def broken(sub: object) -> None:
        raise RuntimeError("a bug in the queue")

    monkeypatch.setattr(browsed, "remove_subscription", broken)
    c.drop()
    assert net.broker.destinations["/queue/work"].consumers == []
    assert not [a for a in net.broker.destinations if a.startswith("/remote-temp-queue/")]
    assert checker.violations == [
        f"connection {c.sid}: its close failed at removing subscription 'b' on /queue/browsed"
    ]
    after = net.connected_client("after")
    after.subscribe("/queue/work", "w", "client-individual")
    assert len(after.bodies()) == 7


@patches_a_core_object
def test_the_checker_finds_a_ghost_consumer() -> None:
    """The checker itself: a subscription a queue still lists after its connection
    closed is reported (here the close is skipped by hand)."""
    net, checker = _checked_network()
    c = net.connected_client("c")
    c.subscribe("/queue/q", "s", "client")
    net.broker.teardown.tear_down = lambda session: None  # type: ignore[method-assign]
    c.drop()
    assert any("/queue/q still lists subscriptions ['s']" in v for v in checker.violations), checker.violations


_TOTAL = 60
_BODY = b"." * 1500  # three messages fill a 4 kB receive buffer


@pytest.mark.parametrize("leave", ["disconnect-alone", "pipelined", "disconnect-unread", "drop"])
@pytest.mark.parametrize("acks", [1, 2, 25])
def test_a_slow_1_0_client_ack_consumer_leaving_mid_stream_loses_nothing(leave: str, acks: int) -> None:
    """The Net::Stomp story at the core, every way its last frames can meet the broker:
    STOMP 1.0, client ack, prefetch 1, a 4 kB receive buffer; after ``acks`` ACKs it
    subscribes to a topic with a receipt and leaves with the next MESSAGE unacknowledged.
    The ACK, the SUBSCRIBE and the DISCONNECT come one by one, or in one write; or the
    DISCONNECT comes while the MESSAGE and the RECEIPT still wait unread; or the socket
    just drops. An auto consumer at prefetch 500 then drains: each message is acknowledged
    or drained, once, and the queue's statistics agree."""
    net, checker = _checked_network()
    producer = net.connected_client("producer")
    for i in range(_TOTAL):
        producer.send("/queue/story", b"m%d" % i + _BODY, persistent="true")
    c = net.client("perl", recv_buffer=4096, auto_read=False)
    c.connect("1.0")
    c.read()
    c.version = "1.0"  # read only now (auto_read is off): frames it sends are 1.0 from here on
    c.send_frame("SUBSCRIBE", {"destination": "/queue/story", "ack": "client", "activemq.prefetchSize": "1"})
    acked = []
    for _ in range(acks):
        c.read()
        message = c.messages()[-1]
        acked.append(message.body)
        ack = {"message-id": message.headers["message-id"]}
        if len(acked) < acks or leave in ("disconnect-alone", "disconnect-unread", "drop"):
            c.send_frame("ACK", ack)
    subscribe = {"destination": "/topic/story", "receipt": "sub"}
    if leave == "pipelined":  # the last ACK, the SUBSCRIBE and the DISCONNECT in one write
        c.send_raw(
            b"".join(
                encode(Frame(cmd, h), "1.0") for cmd, h in [("ACK", ack), ("SUBSCRIBE", subscribe), ("DISCONNECT", {})]
            )
        )
    else:
        c.send_frame("SUBSCRIBE", subscribe)
        if leave != "disconnect-unread":
            c.read()
            assert c.frames()[-1].command == "RECEIPT" and c.frames()[-2].command == "MESSAGE"  # one came meanwhile
        if leave == "drop":
            c.drop()
        else:
            c.disconnect()
    assert c.closed
    drain = net.connected_client("drain")
    drain.subscribe("/queue/story", "d", "auto", **{"activemq.prefetchSize": "500"})
    drained = drain.bodies()
    assert sorted(acked + drained) == sorted(b"m%d" % i + _BODY for i in range(_TOTAL))
    queue = net.broker.destinations["/queue/story"]
    assert (queue.dequeued, queue.size()) == (_TOTAL, 0)
    assert checker.violations == []


def test_a_send_parked_on_its_way_to_a_temporary_queue_is_answered_when_the_owner_leaves() -> None:
    """Another connection's SEND to a temporary queue waits for memory (producer flow
    control); its owner leaves: the SEND gets an ERROR saying why, the producer is no
    longer blocked, and its next SEND goes through."""
    net = VirtualNetwork(
        parse_config({"destination_policy": [{"queue": ">", "memory_limit": "4 kb"}]}), check_teardown=True
    )
    owner = net.connected_client("owner")
    owner.send("/queue/requests", b"ask", **{"reply-to": "/temp-queue/answers"})
    reply_to = net.connected_client("reader")
    reply_to.subscribe("/queue/requests", "r")
    address = reply_to.messages()[-1].headers["reply-to"]
    producer = net.connected_client("producer")
    for i in range(6):
        producer.send(address, b"x" * 1500, receipt=f"a{i}")  # the queue fills: the last ones park
    assert len(producer.frames("RECEIPT")) < 6 and net.broker.sessions[producer.sid].producing.parked
    owner.disconnect()
    errors = [f.headers["message"] for f in producer.frames("ERROR")]
    assert errors and all(m == f"{address} was deleted: the connection that owned it closed" for m in errors)
    assert len(producer.frames("RECEIPT")) + len(errors) == 6
    assert not net.broker.sessions[producer.sid].producing.parked and not net.broker.flow.blocked
    producer.send("/queue/elsewhere", b"on", receipt="later")
    assert producer.frames("RECEIPT")[-1].headers["receipt-id"] == "later"
    assert net.teardown is not None and net.teardown.violations == []


@patches_a_core_object
def test_a_closed_framed_connection_is_never_writable_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection whose edge writes frame by frame (STOMP over WebSocket) closes with
    a RECEIPT still to write, and its close fails at one queue (as a bug would), leaving
    a ghost consumer there. Handing its last output to the edge must not make it
    writable again: a message sent to that queue later goes to a live consumer, not
    into the closed connection, where it would be counted consumed and never read."""
    net, checker = _checked_network()
    producer = net.connected_client("producer")
    c = net.connected_client("ws")
    net.broker.sessions[c.sid].framed = True
    c.subscribe("/queue/ghost", "g", "auto")
    queue = net.broker.destinations["/queue/ghost"]

    def broken(sub: object) -> None:
        raise RuntimeError("a bug in the queue")

    monkeypatch.setattr(queue, "remove_subscription", broken)
    c.disconnect(receipt="bye")  # the RECEIPT waits in the closed connection's output
    assert f"connection {c.sid}: its close failed at removing subscription 'g' on /queue/ghost" in checker.violations
    after = net.connected_client("after")
    after.subscribe("/queue/ghost", "a", "auto")
    producer.send("/queue/ghost", "late")
    assert after.bodies() == [b"late"]
    assert queue.dequeued == 1


@pytest.mark.parametrize("seed", range(12))
def test_the_slow_1_0_consumer_leaving_mid_stream_over_a_paged_backlog_loses_nothing(seed: int, tmp_path: Path) -> None:
    """The Net::Stomp story in random interleavings, over a backlog that does not fit in
    memory (persistent messages paged in from the journal, or non-persistent ones that
    hold the producer back): the slow consumer reads its 4 kB buffer in chunks of any
    size, acknowledges a random number of messages, subscribes to a topic with a receipt,
    then leaves by DISCONNECT, or by DISCONNECT and a dropped socket; the drainer joins
    before the topic SUBSCRIBE, before the DISCONNECT or after it. Each message is
    acknowledged or drained, once, and the queue's statistics agree."""
    rnd = random.Random(seed)
    total, persistent = 120, seed % 2 == 0
    config = BrokerConfig().replace(system_usage={"memory_limit": 256 * 1024}, broker={"data_dir": str(tmp_path)})
    net = VirtualNetwork(config, data_dir=tmp_path, check_teardown=True)
    producer = net.connected_client("producer")
    for i in range(total):
        producer.send("/queue/paged", b"m%d." % i + b"x" * 4000, **({"persistent": "true"} if persistent else {}))
    perl = net.connected_client("perl", version="1.0", recv_buffer=4096)
    perl.auto_read = False  # from here on it reads when it chooses, as much as it asks for
    perl.send_frame("SUBSCRIBE", {"destination": "/queue/paged", "ack": "client", "activemq.prefetchSize": "1"})
    unread: list[Frame] = []

    def next_frame() -> Frame:
        while not unread:
            unread.extend(perl.read(rnd.randint(1, 5000)))
            net.advance(0.001)
        return unread.pop(0)

    drainer: list[VirtualClient] = []
    join_at = rnd.choice(["before the topic", "before the disconnect", "after"])

    def join(when: str) -> None:
        if when == join_at:
            drain = net.connected_client("drain", version=rnd.choice(["1.0", "1.2"]))
            drain.send_frame(
                "SUBSCRIBE", {"destination": "/queue/paged", "id": "d", "ack": "auto", "activemq.prefetchSize": "500"}
            )
            drainer.append(drain)

    acked = []
    for _ in range(rnd.randint(1, 30)):
        message = next_frame()
        assert message.command == "MESSAGE", message
        net.advance(0.02)
        perl.send_frame("ACK", {"message-id": message.headers["message-id"]})
        acked.append(message.body)
    join("before the topic")
    perl.send_frame("SUBSCRIBE", {"destination": "/topic/paged", "ack": "auto", "receipt": "sub-topic"})
    meanwhile = []
    while (frame := next_frame()).command != "RECEIPT":
        meanwhile.append(frame.body)
    join("before the disconnect")
    perl.disconnect()
    if rnd.random() < 0.5:
        perl.drop()
    join("after")
    net.advance(5)
    [drain] = drainer
    drained = drain.bodies()
    assert len(meanwhile) == 1 and meanwhile[0] in drained  # left unacknowledged, came back
    assert sorted(acked + drained) == sorted(b"m%d." % i + b"x" * 4000 for i in range(total))
    queue = net.broker.destinations["/queue/paged"]
    assert (queue.dequeued, queue.size()) == (total, 0)
    assert net.teardown is not None and net.teardown.violations == []
