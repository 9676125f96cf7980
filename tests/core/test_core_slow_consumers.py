"""Slow consumers on topics: pending cursors, the temp store, policies, blocked transports."""

from __future__ import annotations

from pathlib import Path

from minibroker.config import parse_config
from minibroker.destinations import FilePending
from minibroker.edge import VirtualNetwork

BODY = "x" * 1000


def topic_net(
    tmp_path: Path, *, memory: str = "200 kb", temp: str = "10 mb", temp_file: str = "1 mb", **policy
) -> VirtualNetwork:
    """A broker whose topic subscriptions pend in memory (the vm cursor) unless ``policy`` says otherwise."""
    policy.setdefault("pending_cursor", "vm")
    doc = {
        "system_usage": {"memory_limit": memory, "temp_limit": temp},
        "store": {"temp_journal_max_file_length": temp_file},
        "destination_policy": [{"topic": ">", **policy}],
    }
    return VirtualNetwork(parse_config(doc), data_dir=tmp_path / "data", trace=True)


def stuck_subscriber(net: VirtualNetwork, name: str = "slow", prefetch: str = "10"):
    """A topic subscriber that takes prefetch messages and acks nothing."""
    c = net.connected_client(name)
    c.subscribe("/topic/prices", "s", "client-individual", **{"activemq.prefetchSize": prefetch})
    return c


def publish(producer, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        producer.send("/topic/prices", BODY, receipt=f"r{i}", seq=str(i))


def drain(client) -> list[int]:
    """Ack everything until nothing more arrives; returns the seq headers seen."""
    acked = getattr(client, "acked", 0)
    while acked < len(client.messages()):
        for m in client.messages()[acked:]:
            client.ack(m)
            acked += 1
    client.acked = acked
    return [int(m.headers["seq"]) for m in client.messages()]


class TestVmCursor:
    def test_a_full_subscription_blocks_the_producer_until_it_drains(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path)
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 300)
        receipts = len(p.frames("RECEIPT"))
        assert receipts < 300  # memory full: the producer waits
        assert net.broker.memory.percent >= 100
        assert drain(slow) == list(range(300))  # in order, nothing lost
        assert len(p.frames("RECEIPT")) == 300

    def test_one_slow_subscriber_stalls_the_later_ones_too(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path)
        slow = stuck_subscriber(net, "slow")
        fast = net.connected_client("fast")
        fast.subscribe("/topic/prices", "f")
        p = net.connected_client("p")
        publish(p, 300)
        got = len(fast.messages())
        assert got < 300  # held up behind the slow subscriber, in dispatch order
        drain(slow)
        assert len(fast.messages()) == 300


class TestFileCursor:
    def test_swaps_its_whole_memory_list_at_the_mark_then_appends_to_disk(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_cursor="file")
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 300)
        assert len(p.frames("RECEIPT")) == 300  # spooled, not blocked
        sub = next(iter(net.broker.destinations["/topic/prices"].subs))
        assert isinstance(sub.pending, FilePending)
        assert len(sub.pending.disk) > 200 and not sub.pending.memory
        swaps = net.trace.events("swap_out")
        assert swaps and swaps[0]["count"] > 1  # the whole list in one go
        assert net.broker.memory.percent < 70
        assert net.broker.temp_usage.usage == 1024 * 1024  # one whole temp file
        assert drain(slow) == list(range(300))  # read back in order
        assert net.trace.events("swap_in")

    def test_drained_temp_files_are_deleted_except_the_current_one(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_cursor="file", temp_file="128 kb")
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 600)  # several temp files
        assert net.broker.temp_usage.usage >= 3 * 128 * 1024
        drain(slow)
        assert net.broker.temp_usage.usage == 128 * 1024  # the current write file stays

    def test_seed_001_temp_limit_below_the_file_size_blocks_the_producer_forever(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_cursor="file", temp="900 kb", temp_file="1 mb")
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 300)
        drain(slow)  # the consumer has everything
        assert len(slow.messages()) == len(p.frames("RECEIPT"))
        before = len(p.frames("RECEIPT"))
        publish(p, 10, start=1000)
        net.advance(60)
        assert len(p.frames("RECEIPT")) == before  # blocked, with nothing left to consume
        assert net.broker.temp_usage.percent >= 100
        blocks = [e for e in net.trace.events("flow_block", "flow_unblock") if e["session"] == p.tag]
        assert blocks[-1]["event"] == "flow_block" and blocks[-1]["usage"] == "temp"

    def test_with_the_limit_above_the_file_size_it_recovers(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_cursor="file", temp="4 mb", temp_file="1 mb")
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 300)
        drain(slow)
        publish(p, 10, start=1000)
        drain(slow)
        assert len(p.frames("RECEIPT")) == 310


class TestPendingMessageLimit:
    def test_oldest_are_discarded_and_counted(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_message_limit=20)
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 300)
        assert len(p.frames("RECEIPT")) == 300  # never blocked
        topic = net.broker.destinations["/topic/prices"]
        assert topic.discarded == 300 - 10 - 20
        seqs = drain(slow)
        assert seqs[:10] == list(range(10)) and seqs[10:] == list(range(280, 300))
        assert len(net.trace.events("discard")) == topic.discarded

    def test_newest_eviction_keeps_the_oldest(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_message_limit=20, message_eviction_strategy="newest")
        slow = stuck_subscriber(net)
        publish(net.connected_client("p"), 300)
        seqs = drain(slow)
        assert seqs[:30] == list(range(30))

    def test_limit_zero_drops_what_a_full_subscription_cannot_take(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, pending_message_limit=0)
        stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 300)
        assert len(p.frames("RECEIPT")) == 300
        assert net.broker.destinations["/topic/prices"].discarded > 0


class TestSlowConsumerDetection:
    def test_marked_slow_past_its_prefetch_and_unmarked_when_it_catches_up(self, tmp_path: Path) -> None:
        net = topic_net(tmp_path, memory="10 mb")
        slow = stuck_subscriber(net)
        p = net.connected_client("p")
        publish(p, 25)
        sub = net.broker.destinations["/topic/prices"].subs[0]
        assert sub.slow
        drain(slow)
        assert not sub.slow
        marks = [(e["slow"], e["sub"]) for e in net.trace.events("slow_consumer")]
        assert marks == [(True, "s"), (False, "s")]

    def test_abort_slow_consumer_tells_the_client_why(self, tmp_path: Path) -> None:
        net = topic_net(
            tmp_path,
            memory="10 mb",
            abort_slow_consumer=True,
            max_slow_duration=3000,
            abort_slow_consumer_check_period=1000,
        )
        slow = stuck_subscriber(net)
        fast = net.connected_client("fast")
        fast.subscribe("/topic/prices", "f")
        publish(net.connected_client("p"), 25)
        net.advance(3.5)
        err = slow.frames("ERROR")
        assert err and err[0].headers["subscription"] == "s"
        assert "slow too often" in err[0].headers["message"] and "aborted" in err[0].headers["message"]
        assert not slow.closed  # only the subscription went
        assert net.broker.destinations["/topic/prices"].subs[0].id == "f"

    def test_abort_connection(self, tmp_path: Path) -> None:
        net = topic_net(
            tmp_path,
            memory="10 mb",
            abort_slow_consumer=True,
            max_slow_count=2,
            abort_slow_consumer_check_period=1000,
            abort_connection=True,
        )
        slow = stuck_subscriber(net)
        publish(net.connected_client("p"), 25)
        net.advance(2.5)
        assert slow.closed


class TestWriteTimeout:
    def test_a_stuck_socket_is_closed_and_others_go_on(self) -> None:
        config = parse_config({"transport": {"so_write_timeout": 5000, "write_buffer_limit": "16 kb"}})
        net = VirtualNetwork(config, trace=True)
        stuck = net.client("stuck", recv_buffer=8192, auto_read=False)
        stuck.connect()
        stuck.read()
        stuck.subscribe("/queue/work", "s")
        ok = net.connected_client("ok")
        p = net.connected_client("p")
        for _ in range(200):
            p.send("/queue/work", BODY)
        net.advance(4)
        assert not stuck.closed
        net.advance(2)
        assert stuck.closed
        ok.subscribe("/queue/work")
        assert len(ok.messages()) > 150  # the stuck one's unacked share came back, the rest flowed
        assert net.trace.events("write_timeout")
        assert any(e["reason"] == "write_timeout" for e in net.trace.events("disconnect"))


def test_non_persistent_queue_messages_spill_to_the_temp_store(tmp_path: Path) -> None:
    doc = {
        "system_usage": {"memory_limit": "100 kb"},
        "store": {"temp_journal_max_file_length": "1 mb"},
        "destination_policy": [{"queue": ">", "pending_cursor": "file"}],
    }
    net = VirtualNetwork(parse_config(doc), data_dir=tmp_path / "data")
    p = net.connected_client("p")
    for i in range(200):
        p.send("/queue/np", BODY, receipt=f"r{i}", seq=str(i))
    assert len(p.frames("RECEIPT")) == 200  # no flow control: past the mark they go to disk
    queue = net.broker.destinations["/queue/np"]
    stats = queue.cursor_statistics()
    assert stats["tempCount"] > 100 and net.broker.memory.percent < 75
    assert net.broker.temp_usage.usage == 1024 * 1024
    c = net.connected_client("c")
    c.subscribe("/queue/np")
    assert [int(m.headers["seq"]) for m in c.messages()] == list(range(200))
    assert queue.cursor_statistics()["tempCount"] == 0
