"""Memory accounting and producer flow control, on the virtual network."""

from __future__ import annotations

from minibroker.config import parse_config
from minibroker.destinations import Usage
from minibroker.edge import VirtualNetwork
from minibroker.protocol import MESSAGE_OVERHEAD

BODY = "x" * 976  # with the headers the broker adds, about 2 KiB charged per message


def net_with(memory_limit: str = "64 kb", **policy) -> VirtualNetwork:
    """A broker whose non-persistent messages stay in memory (the vm cursor) unless ``policy`` says otherwise."""
    policy.setdefault("pending_cursor", "vm")
    doc: dict = {"system_usage": {"memory_limit": memory_limit}}
    doc["destination_policy"] = [{"queue": ">", **policy}, {"topic": ">", **policy}]
    return VirtualNetwork(parse_config(doc))


class TestUsage:
    def test_children_charge_their_parent(self) -> None:
        root = Usage("memory", 1000)
        a = Usage("a", 1000, root)
        b = Usage("b", 200, root)
        a.increase(300)
        b.increase(100)
        assert (root.usage, root.percent, a.percent, b.percent) == (400, 40, 30, 50)
        a.decrease(300)
        assert root.usage == 100 and root.peak == 400

    def test_is_full_looks_at_ancestors(self) -> None:
        root = Usage("memory", 1000)
        a = Usage("a", 1000, root)
        b = Usage("b", 1000, root)
        b.increase(700)
        assert a.is_full(70) and not a.is_full(100)
        b.increase(300)
        assert a.is_full()

    def test_space_checks_legacy_and_current(self) -> None:
        root = Usage("memory", 1000)
        starving = Usage("A", 1000, root)
        hog = Usage("B", 1000, root)
        hog.increase(700)
        # legacy (ActiveMQ <= 5.14): the parent at the 70% mark blocks A, which holds nothing
        assert not starving.has_space(70, "legacy")
        # current (5.15+): only a 100% full parent or A's own mark blocks it
        assert starving.has_space(70, "current")
        assert not hog.has_space(70, "current")
        Usage("C", 1000, root).increase(300)
        assert not starving.has_space(70, "current")

    def test_listeners_hear_percent_changes(self) -> None:
        u = Usage("u", 100)
        seen: list[tuple[int, int]] = []
        u.add_listener(lambda usage, old, new: seen.append((old, new)))
        u.increase(10)
        u.increase(0)
        u.decrease(5)
        assert seen == [(0, 10), (10, 5)]


class TestAccounting:
    def test_a_queue_charges_memory_until_acknowledged(self) -> None:
        net = net_with("1 mb")
        p = net.connected_client()
        p.send("/queue/m", "abc", custom="1")
        queue = net.broker.destinations["/queue/m"]
        charged = queue.memory.usage
        assert charged > MESSAGE_OVERHEAD + 3
        assert net.broker.memory.usage == charged
        c = net.connected_client()
        c.subscribe("/queue/m", "s", "client-individual")
        assert queue.memory.usage == charged  # delivered, not yet acknowledged
        c.ack(c.messages()[0])
        assert queue.memory.usage == 0 and net.broker.memory.usage == 0

    def test_a_topic_message_is_charged_once_while_any_subscriber_holds_it(self) -> None:
        net = net_with("1 mb")
        subs = [net.connected_client(f"s{i}") for i in range(3)]
        for i, s in enumerate(subs):
            s.subscribe("/topic/m", f"t{i}", "client-individual")
        net.connected_client().send("/topic/m", "shared")
        topic = net.broker.destinations["/topic/m"]
        one = topic.memory.usage
        assert 0 < one < 2 * (MESSAGE_OVERHEAD + 100)
        for s in subs[:2]:
            s.ack(s.messages()[0])
        assert topic.memory.usage == one
        subs[2].ack(subs[2].messages()[0])
        assert topic.memory.usage == 0

    def test_auto_ack_and_disconnects_release_everything(self) -> None:
        net = net_with("1 mb")
        a = net.connected_client()
        a.subscribe("/topic/t")
        b = net.connected_client()
        b.subscribe("/queue/q", "s", "client")
        p = net.connected_client()
        for i in range(10):
            p.send("/topic/t", str(i))
            p.send("/queue/q", str(i))
        a.drop()
        b.drop()
        net.broker.destinations["/queue/q"].purge()
        assert net.broker.memory.usage == 0

    def test_a_destination_memory_limit_is_its_own(self) -> None:
        net = VirtualNetwork(parse_config({"destination_policy": [{"queue": "small", "memory_limit": "10 kb"}]}))
        net.connected_client().send("/queue/small", "x")
        net.connected_client().send("/queue/big", "x")
        assert net.broker.destinations["/queue/small"].memory.limit == 10 * 1024
        assert net.broker.destinations["/queue/big"].memory.limit == net.broker.memory.limit


class TestProducerFlowControl:
    def fill(self, producer, dest: str, n: int, **headers) -> None:
        for _ in range(n):
            producer.send(dest, BODY, **headers)

    def test_receipts_are_withheld_while_memory_is_full(self) -> None:
        net = net_with("64 kb")
        p = net.connected_client("p")
        for i in range(40):
            p.send("/queue/full", BODY, receipt=f"r{i}")
        receipts = [f.headers["receipt-id"] for f in p.frames("RECEIPT")]
        assert 0 < len(receipts) < 40
        assert net.broker.memory.percent >= 100
        assert not p.reading_paused  # with receipts, the broker keeps reading
        c = net.connected_client("c")
        c.subscribe("/queue/full")
        assert [f.headers["receipt-id"] for f in p.frames("RECEIPT")] == [f"r{i}" for i in range(40)]
        assert len(c.messages()) == 40  # nothing lost, in order
        assert [m.headers["message-id"] for m in c.messages()] == sorted(
            (m.headers["message-id"] for m in c.messages()), key=lambda x: int(x.rsplit("-", 1)[1])
        )

    def test_a_blocked_producer_is_logged_at_most_every_30_seconds(self, caplog) -> None:
        """ActiveMQ's "Producer ... stopped to prevent flooding" line, once per
        ``blocked_producer_warning_interval`` (30 s) per destination, however
        often producers block meanwhile."""
        net = net_with("64 kb")
        p = net.connected_client("p")
        lines = lambda: [r for r in caplog.records if "stopped to prevent flooding /queue/full" in r.getMessage()]  # noqa: E731
        with caplog.at_level("WARNING", logger="minibroker"):
            for round_ in range(3):  # block, drain, block again: within 30 s of the first line
                for i in range(40):
                    p.send("/queue/full", BODY, receipt=f"r{round_}-{i}")
                drain = net.connected_client(f"drain{round_}")
                drain.subscribe("/queue/full")  # auto ack: takes them all, freeing the memory
                drain.drop()
                net.advance(5)
            assert len(lines()) == 1
            net.advance(30)
            for i in range(40):
                p.send("/queue/full", BODY, receipt=f"late-{i}")
            assert len(lines()) == 2
        assert "Usage Manager Memory Limit reached" in lines()[0].getMessage()

    def test_a_producer_without_receipts_stops_being_read(self) -> None:
        net = net_with("64 kb")
        p = net.connected_client("p")
        self.fill(p, "/queue/full", 40)
        assert p.reading_paused
        held = net.broker.sessions[p.sid].reading.held
        assert len(held) > 0 or net.broker.sessions[p.sid].producing.parked
        c = net.connected_client("c")
        c.subscribe("/queue/full")
        assert not p.reading_paused
        assert len(c.messages()) == 40

    def test_a_blocked_producer_that_also_consumes_stalls(self) -> None:
        """ActiveMQ's STOMP trap: acks on a blocked connection are not read."""
        net = net_with("64 kb")
        both = net.connected_client("both")
        both.subscribe("/queue/in", "s", "client-individual", **{"activemq.prefetchSize": "1"})
        net.connected_client("feeder").send("/queue/in", "work")
        self.fill(both, "/queue/out", 40)  # memory fills: reading stops
        assert both.reading_paused
        both.ack(both.messages()[0])  # never read by the broker
        assert net.broker.destinations["/queue/in"].size() == 1
        net.connected_client("drain").subscribe("/queue/out")
        assert net.broker.destinations["/queue/in"].size() == 0  # the held ACK was handled

    def test_send_fail_if_no_space_answers_with_an_error(self) -> None:
        net = net_with("64 kb", send_fail_if_no_space=True)
        p = net.connected_client("p")
        for i in range(40):
            p.send("/queue/full", BODY, receipt=f"r{i}")
        errors = p.frames("ERROR")
        assert errors and "Usage Manager Memory Limit reached on queue://full" in errors[0].headers["message"]
        assert errors[0].headers["receipt-id"] == f"r{len(p.frames('RECEIPT'))}"
        assert not p.closed  # as ActiveMQ: the connection stays open

    def test_send_fail_after_a_timeout(self) -> None:
        net = net_with("64 kb", send_fail_if_no_space_after_timeout=2000)
        p = net.connected_client("p")
        for i in range(40):
            p.send("/queue/full", BODY, receipt=f"r{i}")
        assert not p.frames("ERROR")
        net.advance(2.5)
        errors = p.frames("ERROR")
        assert errors and "Wait Timeout" in errors[0].headers["message"]

    def test_without_flow_control_memory_overflows(self) -> None:
        net = net_with("64 kb", producer_flow_control=False)
        p = net.connected_client("p")
        for i in range(40):
            p.send("/queue/full", BODY, receipt=f"r{i}")
        assert len(p.frames("RECEIPT")) == 40
        assert net.broker.memory.percent > 100

    def test_a_destination_limit_blocks_only_its_producer(self) -> None:
        config = parse_config(
            {
                "system_usage": {"memory_limit": "1 mb"},
                "destination_policy": [{"queue": "B", "memory_limit": "32 kb", "pending_cursor": "vm"}],
            }
        )
        net = VirtualNetwork(config)
        pb = net.connected_client("pb")
        for i in range(40):
            pb.send("/queue/B", BODY, receipt=f"b{i}")
        assert len(pb.frames("RECEIPT")) < 40
        pa = net.connected_client("pa")
        for i in range(40):
            pa.send("/queue/A", BODY, receipt=f"a{i}")
        assert len(pa.frames("RECEIPT")) == 40

    def test_a_topic_producer_blocks_when_memory_is_full(self) -> None:
        net = net_with("64 kb")
        slow = net.client("slow", recv_buffer=2048, auto_read=False)
        slow.connect()
        slow.read()
        slow.subscribe("/topic/t", "s")
        p = net.connected_client("p")
        for i in range(60):
            p.send("/topic/t", BODY, receipt=f"r{i}")
        assert len(p.frames("RECEIPT")) < 60
        slow.auto_read = True
        slow.read()
        assert len(p.frames("RECEIPT")) == 60
        assert len(slow.messages()) == 60


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(limit=st.integers(1, 5000), steps=st.lists(st.tuples(st.booleans(), st.integers(1, 2000)), max_size=200))
@settings(max_examples=200, deadline=None)
def test_usage_percent_listeners_and_fullness_match_the_arithmetic(limit: int, steps: list) -> None:
    """The band bookkeeping (percent recomputed only when usage leaves its band) never misses a change."""
    root = Usage("root", limit * 3)
    usage = Usage("u", limit, root)
    heard: list[tuple[int, int]] = []
    usage.add_listener(lambda u, old, new: heard.append((old, new)))
    expected: list[tuple[int, int]] = []
    percent = 0
    for release, amount in steps:
        if release and usage.usage >= amount:
            usage.decrease(amount)
        else:
            usage.increase(amount)
        now = usage.usage * 100 // limit
        if now != percent:
            expected.append((percent, now))
            percent = now
        assert usage.percent == now and root.usage == usage.usage
        for mark in (50, 70, 100):
            assert usage.is_full(mark) == (now >= mark or root.usage * 100 // root.limit >= mark)
    assert heard == expected


@settings(max_examples=300, deadline=None)
@given(
    limits=st.tuples(st.sampled_from([0, 1000, 4096]), st.sampled_from([0, 700, 1000, 3000])),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 2500), st.integers(0, 1300)), max_size=30),
)
def test_the_questions_answer_as_their_definitions(limits: tuple[int, int], steps: list) -> None:
    """``is_full``, ``has_space`` and ``passes`` read the percent kept in each usage's band:
    they must answer as floor(usage * 100 / limit) says, and ``passes`` must say yes exactly
    when a charge and its release call no listener, raising the peaks as the charge would."""
    root = Usage("memory", limits[0])
    child = Usage("q", limits[1], root)
    heard: list[int] = []
    for u in (root, child):
        u.add_listener(lambda usage, old, new: heard.append(new))

    def percent(u: Usage) -> int:
        return u.usage * 100 // u.limit if u.limit > 0 else 0

    for charge, amount, size in steps:
        if charge:
            child.increase(amount)
        else:
            child.decrease(min(amount, child.usage))
        for mark in (1, 70, 100):
            assert child.is_full(mark) == any(percent(u) >= mark and u.limit > 0 for u in (root, child))
            legacy = not any(percent(u) >= mark and u.limit > 0 for u in (root, child))
            assert child.has_space(mark, "legacy") == legacy
            assert child.has_space(mark, "current") == (
                (root.limit <= 0 or root.usage < root.limit) and percent(child) < mark
            )
        before = [(u.usage, u.peak, u.percent) for u in (root, child)]
        count = len(heard)
        child.increase(size)
        child.decrease(size)
        quiet = len(heard) == count
        charged = [(u.usage, u.peak, u.percent) for u in (root, child)]
        # forget that pair's peaks: passes must raise them
        for u, (_, peak, _) in zip((root, child), before, strict=True):
            u.peak = peak
        del heard[count:]
        assert child.passes(size) == quiet
        if quiet:
            assert [(u.usage, u.peak, u.percent) for u in (root, child)] == charged
            assert len(heard) == count
        else:
            assert [(u.usage, u.peak, u.percent) for u in (root, child)] == before
