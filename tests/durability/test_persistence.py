"""Persistence in the broker and the store cursor, on the virtual network with real journals."""

from __future__ import annotations

from pathlib import Path

import pytest

from minibroker.config import parse_config
from minibroker.edge import VirtualNetwork

BODY = "x" * 976


def persistent_net(tmp_path: Path, doc: dict | None = None) -> VirtualNetwork:
    return VirtualNetwork(parse_config(doc or {}), data_dir=tmp_path / "data")


class TestRestart:
    def test_persistent_messages_survive_and_others_do_not(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        p = net.connected_client()
        p.send("/queue/keep", "durable 1", persistent="true")
        p.send("/queue/keep", "transient")
        p.send("/queue/keep", "durable 2", persistent="true", custom="header: kept")
        net.restart()
        c = net.connected_client()
        c.subscribe("/queue/keep")
        assert c.bodies() == [b"durable 1", b"durable 2"]
        msg = c.messages()[1]
        assert msg.headers["custom"] == "header: kept" and msg.headers["persistent"] == "true"

    def test_acknowledged_messages_are_gone_and_unacked_come_back_redelivered(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        p = net.connected_client()
        for i in range(5):
            p.send("/queue/work", f"m{i}", persistent="true")
        c = net.connected_client()
        c.subscribe("/queue/work", "s", "client-individual", **{"activemq.prefetchSize": "3"})
        c.ack(c.messages()[0])
        ids = [m.headers["message-id"] for m in c.messages()]
        net.restart()
        again = net.connected_client()
        again.subscribe("/queue/work")
        assert again.bodies() == [b"m1", b"m2", b"m3", b"m4"]
        # m1 and m2 were delivered and not acked, m3 once m0's ack freed the prefetch; m4 never
        assert [m.headers.get("redelivered") for m in again.messages()] == ["true", "true", "true", None]
        assert [m.headers["message-id"] for m in again.messages()][:3] == ids[1:]

    def test_sequence_and_ids_continue_after_restart(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        net.connected_client().send("/queue/q", "old", persistent="true")
        net.restart()
        net.connected_client().send("/queue/q", "new", persistent="true")
        c = net.connected_client(version="1.1")
        c.subscribe("/queue/q", "s", "client")
        assert c.bodies() == [b"old", b"new"]
        c.ack(c.messages()[1])  # 1.1 ACK by message-id works for recovered and new ids
        net.restart()
        again = net.connected_client()
        again.subscribe("/queue/q")
        assert again.bodies() == []

    def test_priorities_survive(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path, {"destination_policy": [{"queue": ">", "prioritized_messages": True}]})
        p = net.connected_client()
        for body, prio in [("low", 1), ("high", 9), ("mid", 5), ("high2", 9)]:
            p.send("/queue/p", body, persistent="true", priority=str(prio))
        net.restart()
        c = net.connected_client()
        c.subscribe("/queue/p")
        assert c.bodies() == [b"high", b"high2", b"mid", b"low"]

    def test_committed_transactions_survive_and_open_ones_do_not(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        p = net.connected_client()
        p.send_frame("BEGIN", {"transaction": "t1"})
        p.send("/queue/tx", "committed", transaction="t1", persistent="true")
        p.send_frame("COMMIT", {"transaction": "t1", "receipt": "c"})
        assert p.last().command == "RECEIPT"
        p.send_frame("BEGIN", {"transaction": "t2"})
        p.send("/queue/tx", "never committed", transaction="t2", persistent="true")
        net.restart()
        c = net.connected_client()
        c.subscribe("/queue/tx")
        assert c.bodies() == [b"committed"]

    def test_transactional_acks_are_atomic(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        p = net.connected_client()
        for i in range(3):
            p.send("/queue/txa", f"m{i}", persistent="true")
        c = net.connected_client()
        c.subscribe("/queue/txa", "s", "client-individual")
        c.send_frame("BEGIN", {"transaction": "t"})
        for m in c.messages()[:2]:
            c.ack(m, transaction="t")
        c.send_frame("COMMIT", {"transaction": "t"})
        net.restart()
        again = net.connected_client()
        again.subscribe("/queue/txa")
        assert again.bodies() == [b"m2"]

    def test_durable_subscriptions_and_their_messages_survive(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        d = net.client("d")
        d.connect(client_id="app")
        d.subscribe("/topic/news", "s", selector="kind = 'keep'", **{"activemq.subscriptionName": "reader"})
        d.disconnect()
        p = net.connected_client()
        p.send("/topic/news", "kept", kind="keep", persistent="true")
        p.send("/topic/news", "filtered", kind="drop", persistent="true")
        p.send("/topic/news", "not persistent", kind="keep")
        net.restart()
        back = net.client("back")
        back.connect(client_id="app")
        back.subscribe("/topic/news", "s", selector="kind = 'keep'", **{"activemq.subscriptionName": "reader"})
        assert back.bodies() == [b"kept"]
        back.disconnect()
        net.restart()
        again = net.client("again")
        again.connect(client_id="app")
        again.subscribe("/topic/news", "s", selector="kind = 'keep'", **{"activemq.subscriptionName": "reader"})
        assert again.bodies() == []  # consumed (auto ack) before the second restart

    def test_a_durable_message_delivered_before_a_restart_comes_back_redelivered(self, tmp_path: Path) -> None:
        """As a queue's: its stored copy is marked when it goes to a client-ack durable subscriber."""
        net = persistent_net(tmp_path)
        d = net.client("d")
        d.connect(client_id="app")
        d.subscribe("/topic/t", "s", "client-individual", **{"activemq.subscriptionName": "r"})
        net.connected_client().send("/topic/t", "held", persistent="true")
        assert d.bodies() == [b"held"] and "redelivered" not in d.messages()[0].headers
        net.restart()
        back = net.client("back")
        back.connect(client_id="app")
        back.subscribe("/topic/t", "s", "client-individual", **{"activemq.subscriptionName": "r"})
        assert back.bodies() == [b"held"] and back.messages()[0].headers.get("redelivered") == "true"

    def test_dead_lettered_messages_persist_in_the_dlq(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path, {"destination_policy": [{"queue": ">", "maximum_redeliveries": 0}]})
        c = net.connected_client()
        c.subscribe("/queue/src", "s", "client-individual")
        net.connected_client().send("/queue/src", "poison", persistent="true")
        c.nack(c.messages()[0])
        net.restart()
        d = net.connected_client()
        d.subscribe("/queue/ActiveMQ.DLQ")
        assert d.bodies() == [b"poison"]
        s = net.connected_client()
        s.subscribe("/queue/src")
        assert s.bodies() == []


class TestStoreCursor:
    def small_memory(self, tmp_path: Path, **policy) -> VirtualNetwork:
        doc = {"system_usage": {"memory_limit": "100 kb"}}
        if policy:
            doc["destination_policy"] = [{"queue": ">", **policy}]
        return persistent_net(tmp_path, doc)

    def test_past_the_high_water_mark_messages_are_store_only(self, tmp_path: Path) -> None:
        net = self.small_memory(tmp_path)
        p = net.connected_client()
        for i in range(100):
            p.send("/queue/backlog", BODY, persistent="true", receipt=str(i))
        assert len(p.frames("RECEIPT")) == 100  # no flow control: memory stops at the mark
        queue = net.broker.destinations["/queue/backlog"]
        stats = queue.cursor_statistics()
        assert stats["cachedCount"] + stats["storeOnlyCount"] == 100
        assert stats["storeOnlyCount"] > 50 and not stats["cacheEnabled"]
        assert 60 <= queue.memory.percent < 72
        c = net.connected_client()
        c.subscribe("/queue/backlog")
        assert len(c.messages()) == 100
        assert queue.cursor_statistics()["storeOnlyCount"] == 0 and queue.memory.usage == 0

    def test_store_only_messages_keep_priority_expiry_and_redelivery(self, tmp_path: Path) -> None:
        net = self.small_memory(tmp_path, prioritized_messages=True, expire_messages_period=1000)
        p = net.connected_client()
        soon = str(net.clock.wall_ms() + 500)
        for i in range(100):  # past the mark after about 70: the rest are store-only
            p.send(
                "/queue/prio",
                BODY,
                persistent="true",
                priority=str(i % 10),
                n=str(i),
                **({"expires": soon} if i in (95, 96) else {}),
            )
        queue = net.broker.destinations["/queue/prio"]
        assert queue.cursor_statistics()["storeOnlyCount"] > 20
        net.advance(1.5)  # the sweep expires the two store-only messages
        assert queue.expired == 2 and queue.size() == 98
        c = net.connected_client()
        c.subscribe("/queue/prio", "s", "client-individual", **{"activemq.prefetchSize": "3"})
        first = [m.headers["n"] for m in c.messages()]
        net.restart()  # the three delivered come back redelivered; all come back store-only
        c = net.connected_client()
        c.subscribe("/queue/prio")
        got = c.messages()
        expected = sorted((n for n in range(100) if n not in (95, 96)), key=lambda n: (-(n % 10), n))
        assert [int(m.headers["n"]) for m in got] == expected
        assert sorted(m.headers["n"] for m in got if m.headers.get("redelivered")) == sorted(first)

    def test_a_temporary_queue_s_store_only_backlog_goes_with_its_owner(self, tmp_path: Path) -> None:
        """A temporary queue is purged when its owner leaves: its store-only messages
        are dequeued from the journal, walked a chunk at a time, none left behind."""
        net = self.small_memory(tmp_path)
        owner = net.connected_client()
        for i in range(100):
            owner.send("/temp-queue/t", BODY, persistent="true", n=str(i))
        [queue] = [d for a, d in net.broker.destinations.items() if "temp-queue" in a]
        assert queue.cursor_statistics()["storeOnlyCount"] > 20
        [journal] = net.broker.store.journals()
        assert journal.live_count == 100
        owner.drop()
        net.pump()
        assert journal.live_count == 0 and len(queue.cursor.store_only) == 0 and queue.dequeued == 100
        net.restart()
        assert net.broker.store.journals()[0].live_count == 0

    def test_page_in_takes_max_page_size_at_a_time(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path, {"destination_policy": [{"queue": ">", "max_page_size": 5}]})
        p = net.connected_client()
        for i in range(12):
            p.send("/queue/pages", f"m{i}", persistent="true")
        net.restart()
        queue = net.broker.destinations["/queue/pages"]
        assert queue.cursor_statistics()["storeOnlyCount"] == 12 and queue.cursor_statistics()["cachedCount"] == 0
        c = net.connected_client()
        c.subscribe("/queue/pages", "s", "client-individual", **{"activemq.prefetchSize": "3"})
        stats = queue.cursor_statistics()
        assert stats["pagedInCount"] == 5 and stats["cachedCount"] == 2 and stats["storeOnlyCount"] == 7
        for _ in range(4):
            for m in c.messages()[-3:]:
                c.ack(m)
        assert c.bodies() == [f"m{i}".encode() for i in range(12)]

    def test_a_page_in_stops_once_the_broker_is_at_90_percent(self, tmp_path: Path) -> None:
        """ActiveMQ's canRecoveryNextMessage: the page is charged at once, but cut
        where the broker's memory reaches 90%, as if charged message by message."""
        net = persistent_net(
            tmp_path,
            {
                "system_usage": {"memory_limit": "100 kb"},
                "destination_policy": [{"queue": "A", "memory_limit": "10 mb"}, {"queue": "B", "pending_cursor": "vm"}],
            },
        )
        p = net.connected_client()
        for i in range(30):
            p.send("/queue/A", BODY, persistent="true", n=str(i))
        net.restart()
        p = net.connected_client()
        while net.broker.memory.percent < 85:  # consumer-less B holds the memory, non-persistent
            p.send("/queue/B", BODY)
        root, queue = net.broker.memory, net.broker.destinations["/queue/A"]
        before = root.usage
        c = net.connected_client()
        c.subscribe("/queue/A", "s", "client-individual", **{"activemq.prefetchSize": "1"})
        paged = queue.cursor_statistics()["pagedInCount"]
        size = (root.usage - before) // paged
        assert 1 < paged < 30
        assert root.percent >= 90 and (before + (paged - 1) * size) * 100 // root.limit < 90
        assert queue.memory.usage == paged * size  # each paged-in message is charged to A once
        assert [m.headers["n"] for m in c.messages()] == ["0"]

    def test_statistics_show_the_index_memory_no_usage_counts(self, tmp_path: Path) -> None:
        """A store-only backlog costs index memory outside every usage: the broker's
        statistics say how much (journal rows of ~17 bytes, cursor pairs of 8)."""
        from minibroker.ops import broker_statistics

        net = self.small_memory(tmp_path)
        empty = broker_statistics(net.broker)["indexBytes"]
        p = net.connected_client()
        for _ in range(300):
            p.send("/queue/deep", BODY, persistent="true")
        stats = broker_statistics(net.broker)
        stored = net.broker.destinations["/queue/deep"].cursor_statistics()["storeOnlyCount"]
        assert stored > 200 and stats["memoryPercentUsage"] < 100
        grown = stats["indexBytes"] - empty
        assert 300 * 17 + stored * 8 <= grown <= 300 * 22 + stored * 12
        net.restart()  # everything store-only now, and counted again from the recovered journal
        assert broker_statistics(net.broker)["indexBytes"] >= 300 * (17 + 8)

    def test_a_deep_backlog_keeps_a_bounded_index_in_memory(self, tmp_path: Path) -> None:
        """Past the cache, the journal's index blocks and the cursor's chunks go to
        scratch files (blocks of 16 rows here, four of them in memory; chunks of 16
        pairs, two in memory): the index in memory stops growing with the backlog,
        and every message still comes back once, in order, across a restart."""
        from unittest import mock

        from minibroker.destinations import seqfifo
        from minibroker.ops import broker_statistics
        from storage import entries

        with (
            mock.patch.object(entries, "BLOCK_ROWS", 16),
            mock.patch.object(entries, "_SPLIT_ROWS", 32),
            mock.patch.object(seqfifo, "CHUNK", 16),
        ):
            net = persistent_net(
                tmp_path,
                {
                    "system_usage": {"memory_limit": "100 kb"},
                    "store": {"index_cache_rows": 1, "journal_max_file_length": "1 mb"},
                },
            )
            p = net.connected_client()
            for i in range(1000):
                p.send("/queue/deep", "x" * 100, persistent="true", n=str(i))
            stats = broker_statistics(net.broker)
            queue = net.broker.destinations["/queue/deep"]
            assert queue.cursor_statistics()["storeOnlyCount"] > 900
            # In memory: at most 4 + 2 blocks of 16 rows (17 bytes, arrays over-allocate) and 2 chunks of 16 pairs.
            assert stats["indexBytes"] < 6 * 16 * 17 * 2 + 2 * 16 * 8 * 2
            assert stats["indexSpilledBytes"] > 900 * (17 + 8)
            c = net.connected_client()
            c.subscribe("/queue/deep", "s", "client-individual", **{"activemq.prefetchSize": "50"})
            for m in c.messages()[:30]:
                c.ack(m)
            delivered = len(c.messages())  # the acks made room for 30 more
            assert delivered == 80
            net.restart()  # 970 left: 50 of them delivered and unacknowledged
            assert broker_statistics(net.broker)["indexBytes"] < 6 * 16 * 17 * 2
            c = net.connected_client()
            c.subscribe("/queue/deep")
            got = c.messages()
            assert [int(m.headers["n"]) for m in got] == list(range(30, 1000))
            assert [m.headers.get("redelivered") for m in got[:51]] == ["true"] * 50 + [None]
            assert queue is not net.broker.destinations["/queue/deep"]
            assert net.broker.destinations["/queue/deep"].size() == 0

    def test_nothing_is_loaded_after_restart_until_a_consumer_comes(self, tmp_path: Path) -> None:
        net = self.small_memory(tmp_path)
        p = net.connected_client()
        for _ in range(30):
            p.send("/queue/idle", BODY, persistent="true")
        net.restart()
        assert net.broker.memory.usage == 0
        assert net.broker.destinations["/queue/idle"].size() == 30

    def seed_000(self, tmp_path: Path, space_check: str, b_limit: str | None = None) -> tuple[int, str]:
        """The starving consumers, symptom 1: A's messages in the store, a restart, B filling memory, a consumer on A."""
        policies = [{"queue": ">", "space_check": space_check}]
        if b_limit:
            policies.append({"queue": "B", "space_check": space_check, "memory_limit": b_limit})
        net = persistent_net(tmp_path, {"system_usage": {"memory_limit": "100 kb"}, "destination_policy": policies})
        p = net.connected_client()
        for i in range(10):
            p.send("/queue/A", f"a{i}", persistent="true")
        net.restart()
        p = net.connected_client("producer-b")
        for _ in range(200):
            p.send("/queue/B", BODY, persistent="true")
        consumer = net.connected_client("consumer-a")
        consumer.subscribe("/queue/A")
        diagnosis = " ".join(f["summary"] for f in net.broker.diagnose())
        return len(consumer.messages()), diagnosis

    def test_seed_000_legacy_space_check_starves_queue_a(self, tmp_path: Path) -> None:
        received, diagnosis = self.seed_000(tmp_path, "legacy")
        assert received == 0
        assert "/queue/A: 1 consumer(s) starved: 10 messages in the store" in diagnosis

    def test_seed_000_current_space_check_does_not(self, tmp_path: Path) -> None:
        received, diagnosis = self.seed_000(tmp_path, "current")
        assert received == 10 and diagnosis == ""

    def test_seed_000_cure_is_a_destination_memory_limit(self, tmp_path: Path) -> None:
        received, diagnosis = self.seed_000(tmp_path, "legacy", b_limit="20 kb")
        assert received == 10 and diagnosis == ""

    def test_a_slow_consumer_at_its_own_destination_limit_is_not_starved(self, tmp_path: Path) -> None:
        """Lab 00's slow cure: a queue with its own memory limit and a slow consumer with a big
        prefetch. The queue's cursor pages a whole batch in past its mark (its memory well over
        100% of its own limit, as ActiveMQ's does) and then may page in no more, but its consumer
        is not starved: it holds more messages than it can take. No starving diagnosis."""
        policies = [
            {"queue": ">", "space_check": "legacy"},
            {"queue": "S", "space_check": "legacy", "memory_limit": "64 kb"},
        ]
        net = persistent_net(tmp_path, {"system_usage": {"memory_limit": "4 mb"}, "destination_policy": policies})
        p = net.connected_client()
        for _ in range(300):
            p.send("/queue/S", BODY, persistent="true")
        consumer = net.connected_client("slow")
        consumer.subscribe("/queue/S", "s", "client", **{"activemq.prefetchSize": "800"})
        queue = net.broker.destinations["/queue/S"]
        assert len(queue.cursor.store_only) > 0 and not queue.cursor.can_page_in()
        assert queue.memory.percent >= 70 and len(consumer.messages()) > 0  # at its own mark, its consumer busy
        assert net.broker.diagnose() == []


class TestStoreLimits:
    def test_ring_refuses_an_enqueue_with_qpid_s_message(self, tmp_path: Path) -> None:
        doc = {
            "store": {"layout": "ring", "file_count": 4, "file_size": "64 kb"},
            "destination_policy": [{"queue": ">", "prioritized_messages": True}],
        }
        net = persistent_net(tmp_path, doc)
        p = net.connected_client("p")
        c = net.connected_client("c")
        c.subscribe(
            "/queue/Durable", "s", "client-individual", selector="JMSPriority > 1", **{"activemq.prefetchSize": "1000"}
        )
        # Qpid's enqueue threshold: one low-priority message per file stays; the rest come and go.
        n = 0
        for _round in range(20):
            p.send("/queue/Durable", "pin", persistent="true", priority="1", receipt=f"r{n}")
            n += 1
            for _ in range(60):
                p.send("/queue/Durable", BODY[:200], persistent="true", priority="2", receipt=f"r{n}")
                n += 1
            for m in c.messages():
                c.ack(m)
            c.clear()
            if p.frames("ERROR"):
                break
        errors = p.frames("ERROR")
        assert errors, "the ring never refused"
        assert errors[0].headers["message"] == 'Enqueue capacity threshold exceeded on queue "Durable".'
        assert errors[0].headers["receipt-id"].startswith("r")
        assert not p.closed
        live = net.broker.destinations["/queue/Durable"].size()
        assert live < 10  # a handful of pinning messages fill a 256 KB ring
        [journal] = net.broker.store.journals()
        assert journal.live_count == live

    def test_a_full_store_blocks_persistent_producers(self, tmp_path: Path) -> None:
        doc = {"system_usage": {"store_limit": "40 mb"}, "store": {"journal_max_file_length": "32 mb"}}
        net = persistent_net(tmp_path, doc)
        p = net.connected_client("p")
        p.send("/queue/q", "fits", persistent="true", receipt="1")
        assert p.last().command == "RECEIPT"  # one 32 MB file: 80%
        assert net.broker.store_usage.percent == 80
        net.broker.store_usage.increase(10 * 1024 * 1024)  # another file's worth, as if it rolled
        p.send("/queue/q", "blocked", persistent="true", receipt="2")
        assert p.last().headers.get("receipt-id") != "2"
        p.send("/queue/q", "not persistent", receipt="3")
        net.broker.store_usage.decrease(10 * 1024 * 1024)
        with net.broker.turn():  # as if a dequeue had freed it, in an event
            net.broker.flow.space_freed()
        net.pump()
        assert [f.headers["receipt-id"] for f in p.frames("RECEIPT")] == ["1", "2", "3"]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_recovered_messages_can_be_acked_in_every_version(tmp_path: Path, version: str) -> None:
    net = persistent_net(tmp_path)
    p = net.connected_client()
    for i in range(3):
        p.send("/queue/old", f"m{i}", persistent="true")
    for _ in range(30):  # more messages elsewhere, so seqs of this run overlap the recovered ids'
        p.send("/queue/other", "x", persistent="true")
    net.restart()
    c = net.connected_client(version=version)
    c.subscribe("/queue/old", "s", "client-individual" if version != "1.0" else "client")
    assert c.bodies() == [b"m0", b"m1", b"m2"]
    c.ack(c.messages()[1], receipt="r")
    assert c.last().command == "RECEIPT"
    c.drop()
    net.restart()
    again = net.connected_client()
    again.subscribe("/queue/old")
    expected = [b"m0", b"m2"] if version != "1.0" else [b"m2"]  # 1.0's client ack is cumulative
    assert again.bodies() == expected


@pytest.mark.parametrize("layout", ["ring", "growing"])
def test_store_read_many_pages_in_what_read_does_across_journals(tmp_path: Path, layout: str) -> None:
    """A page-in reads its batch at once: the messages (headers unescaped, body,
    meta) equal what reading them one by one gives, in the order asked."""
    from minibroker.config import StoreConfig
    from minibroker.durability import MessageStore, encode_payload

    store = MessageStore(StoreConfig(layout=layout, file_count=4, file_size=64 * 1024), tmp_path / "data")
    try:
        refs = []
        for n in range(30):
            key = "/queue/A" if n % 2 else "/queue/B"
            headers = {"n": str(n), "odd:name\\": "a\nb" if n % 3 == 0 else "plain"}
            refs.append(
                store.enqueue(
                    key,
                    encode_payload(
                        n + 1,
                        f"ID:b-1-{n}",
                        headers,
                        b"body %d" % n,
                        persistent=True,
                        priority=n % 10,
                        expires=0,
                        timestamp=n,
                    ),
                )
            )
        wanted = refs[::-1][:25]
        batch = store.read_many(wanted)
        assert batch == [store.read(ref) for ref in wanted]
        assert batch[0].headers == {"n": "29", "odd:name\\": "plain"}
        assert batch[2].headers == {"n": "27", "odd:name\\": "a\nb"} and batch[2].message_id == "ID:b-1-27"
    finally:
        store.close()


def test_a_paged_in_message_goes_on_the_wire_as_the_stored_block_says() -> None:
    """A paged-in message reuses its stored (STOMP 1.2) header block; the frame
    is byte for byte what encoding its headers gives, in every version."""
    from minibroker.durability import decode_payload, encode_payload
    from minibroker.protocol import Message

    headers = {"plain": "v", "colon:name": "a:b", "multi": "x\ny", "back\\slash": "c\rd", "naïve": "é"}
    stored = decode_payload(
        encode_payload(9, "ID:b-1:9", headers, b"bo\x00dy", persistent=True, priority=4, expires=0, timestamp=1)
    )
    assert stored.headers == headers and stored.message_id == "ID:b-1:9"
    paged = Message(
        9,
        stored.message_id,
        "/queue/q",
        stored.headers,
        stored.body,
        message_id_wire=stored.wire_message_id,
        wire_headers=stored.wire_headers,
    )
    fresh = Message(9, "ID:b-1:9", "/queue/q", dict(headers), b"bo\x00dy")
    for version in ("1.0", "1.1", "1.2"):
        assert paged.tail(version) == fresh.tail(version)
        assert paged.message_id_wire(version) == fresh.message_id_wire(version)


@pytest.mark.parametrize(
    "headers",
    [
        {"destination": "/queue/q", "plain": "v", "priority": "4"},  # decoded on first use
        {"colon:name": "a:b", "naïve": "é"},  # escaped or not ASCII: decoded at once
    ],
)
def test_a_lazily_decoded_message_is_the_same_message(headers: dict) -> None:
    """Page-in leaves plain header blocks undecoded until something needs them:
    size, headers, selectors' view and every version's frame are unchanged."""
    from minibroker.durability import decode_messages, encode_payload
    from minibroker.protocol import Message

    payload = encode_payload(3, "ID:b-1:3", headers, b"body", persistent=True, priority=4, expires=0, timestamp=1)
    [paged] = decode_messages([payload], [3], "/queue/q")
    plain = all(k.isascii() and ":" not in k + v for k, v in headers.items())
    assert (paged._headers is None, paged._message_id is None) == (plain, plain)  # left for first use
    fresh = Message(3, "ID:b-1:3", "/queue/q", dict(headers), b"body")
    assert paged.size == fresh.size and paged.message_id == "ID:b-1:3"
    for version in ("1.0", "1.1", "1.2"):
        assert paged.tail(version) == fresh.tail(version)
    assert paged.header_view() == fresh.header_view()
    assert dict(paged.headers) == headers


#: Payloads as the first format (version 1) wrote them: one length, then a block with the
#: message-id line first. Journals written before version 2 hold these.
_V1_PAYLOADS = [
    (
        "010107000068e5cf8b01000000806e87740100002a00000000000000470000006d6573736167652d69643a49445c636f6c642d315c"
        "6334320a64657374696e6174696f6e3a2f71756575652f710a636f6c6f75723a626c75650a6e61c3af76653ac3a95c63310a68656c6c6f",
        (
            42,
            "ID:old-1:42",
            {"destination": "/queue/q", "colour": "blue", "naïve": "é:1"},
            b"hello",
            True,
            7,
            1700000000000,
            1600000000000,
        ),
    ),
    (
        "01000400000000000000000001000000000000002b00000000000000360000006d6573736167652d69643a49445c636f6c642d315c"
        "6334330a64657374696e6174696f6e3a2f71756575652f710a706c61696e3a760a",
        (43, "ID:old-1:43", {"destination": "/queue/q", "plain": "v"}, b"", False, 4, 0, 1),
    ),
]


@pytest.mark.parametrize("payload_hex, fields", _V1_PAYLOADS)
def test_payloads_of_the_first_format_still_decode(payload_hex: str, fields: tuple) -> None:
    """Version 2 payloads carry their lengths in the prefix; a journal written by the
    first format must still page in the same messages, lazily or not."""
    from minibroker.durability import decode_messages, decode_meta, decode_payload, encode_payload
    from minibroker.protocol import Message

    payload = bytes.fromhex(payload_hex)
    seq, message_id, headers, body, persistent, priority, expires, timestamp = fields
    eager = decode_payload(payload)
    assert (
        eager.seq,
        eager.message_id,
        eager.headers,
        eager.body,
        eager.persistent,
        eager.priority,
        eager.expires,
        eager.timestamp,
    ) == fields
    assert decode_meta(payload) == (seq, priority, expires)
    fresh = Message(seq, message_id, "/queue/q", headers, body)
    [paged] = decode_messages([payload], [seq], "/queue/q")
    assert paged.message_id == message_id and dict(paged.headers) == headers and paged.size == fresh.size
    for version in ("1.0", "1.1", "1.2"):
        assert paged.tail(version) == fresh.tail(version)
    again = encode_payload(
        seq, message_id, headers, body, persistent=persistent, priority=priority, expires=expires, timestamp=timestamp
    )
    assert again[0] == 2 and decode_payload(again) == eager  # written again, it is version 2


def test_a_payload_shorter_than_its_lengths_is_refused() -> None:
    from minibroker.durability import decode_payload, encode_payload

    payload = encode_payload(
        1, "ID:x-1:1", {"destination": "/queue/q"}, b"body", persistent=True, priority=4, expires=0, timestamp=0
    )
    with pytest.raises(ValueError, match="shorter than its lengths"):
        decode_payload(payload[: len(payload) - len(b"body") - 3])


class TestDeferredDequeues:
    """A dequeue outside a transaction is written at the next flush, with the
    others of the turn, as one DEQUEUE_MANY record (``MessageStore.dequeue``)."""

    @staticmethod
    def _store(tmp_path: Path, **options: object):  # type: ignore[no-untyped-def]
        from minibroker.config import StoreConfig
        from minibroker.durability import MessageStore

        return MessageStore(StoreConfig(**options), tmp_path / "data")  # type: ignore[arg-type]

    @staticmethod
    def _payload(n: int) -> bytes:
        from minibroker.durability import encode_payload

        return encode_payload(
            n, f"ID:d-{n}", {"n": str(n)}, b"body %d" % n, persistent=True, priority=4, expires=0, timestamp=0
        )

    def test_dequeues_wait_for_the_flush_then_count_as_one_write(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        refs = [store.enqueue("/queue/A", self._payload(n)) for n in range(10)]
        store.flush()
        journal = refs[0].journal
        generation, last = store.write_generation, journal.last_seq
        for ref in refs[:6]:
            store.dequeue(ref)
        assert (store.deferred, journal.live_count, journal.last_seq, store.write_generation) == (
            6,
            10,
            last,
            generation,
        )
        store.flush()
        assert (store.deferred, journal.live_count, journal.last_seq) == (0, 4, last + 1)  # one record
        assert store.write_generation == generation + 1  # a sync after this covers them
        assert store.needs_sync
        for ref in refs[6:8]:
            store.dequeue(ref)
        store.close()  # writes the deferred ones too
        again = self._store(tmp_path)
        try:
            assert [location.seq for _, location, _, _ in again.recover()] == [r.seq for r in refs[8:]]
        finally:
            again.close()

    def test_a_deep_purge_does_not_hold_its_dequeues(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """At most ``_DEFERRED_MAX`` dequeues of a journal wait: past that they are
        written at once, so a purge of millions holds none of them in memory."""
        from minibroker.durability import persistence

        monkeypatch.setattr(persistence, "_DEFERRED_MAX", 4)
        store = self._store(tmp_path)
        try:
            refs = [store.enqueue("/queue/P", self._payload(n)) for n in range(10)]
            journal, last = refs[0].journal, refs[0].journal.last_seq
            for ref in refs:
                store.dequeue(ref)
            assert store.deferred == 2 and journal.live_count == 2 and journal.last_seq == last + 2
            store.flush()
            assert store.deferred == 0 and journal.live_count == 0 and journal.last_seq == last + 3
        finally:
            store.close()

    def test_a_dequeue_the_journal_cannot_write_is_logged_and_comes_back(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A storage error while writing a turn's dequeues (it has not been seen: a
        ring keeps room for them) must not stop the broker's turn: it is logged,
        and the messages, still in the journal, come back at the next start."""
        from storage import JournalFull
        from storage.journal import Journal

        store = self._store(tmp_path)
        refs = [store.enqueue("/queue/F", self._payload(n)) for n in range(3)]
        store.dequeue(refs[0])
        with monkeypatch.context() as m:
            m.setattr(Journal, "dequeue_many", lambda self, seqs: (_ for _ in ()).throw(JournalFull("j", 2, 1)))
            store.flush()  # does not raise
        assert store.deferred == 0
        assert "could not write 1 dequeues to journal journal" in caplog.text
        assert "come back at a restart" in caplog.text
        store.close()
        again = self._store(tmp_path)
        try:
            assert [location.seq for _, location, _, _ in again.recover()] == [r.seq for r in refs]
        finally:
            again.close()

    def test_a_full_ring_takes_an_enqueue_once_the_deferred_dequeues_are_written(self, tmp_path: Path) -> None:
        from storage import StorageError

        store = self._store(tmp_path, layout="ring", file_count=4, file_size=64 * 1024)
        try:
            refs = []
            with pytest.raises(StorageError):
                while True:
                    refs.append(store.enqueue("/queue/R", self._payload(len(refs)) + bytes(900)))
            for ref in refs:
                store.dequeue(ref)
            assert store.deferred == len(refs)
            store.enqueue("/queue/R", self._payload(0) + bytes(900))  # refused with the dequeues unwritten
            assert store.deferred == 0 and refs[0].journal.live_count == 1
        finally:
            store.close()

    def test_a_drained_page_is_one_record_written_before_the_turn_s_frames_go_out(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path)
        p = net.connected_client()
        for i in range(50):
            p.send("/queue/d", f"m{i}", persistent="true")
        journal = net.broker.store.journal_for("/queue/d")
        before = journal.last_seq
        c = net.connected_client()
        c.subscribe("/queue/d")  # auto ack: all 50 consumed in one turn
        assert len(c.messages()) == 50
        assert journal.live_count == 0 and journal.last_seq == before + 1
        for i in range(3):
            p.send("/queue/e", f"n{i}", persistent="true")
        broker = net.broker
        late = broker.open_session("late")
        with broker.turn():
            broker.receive_data(
                late,
                b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00SUBSCRIBE\nid:1\ndestination:/queue/e\nack:auto\n\n\x00",
            )
            # Consumed (auto ack) in this turn, not yet written: a crash now loses the
            # MESSAGE frames and the dequeues together, and the messages come back.
            assert broker.store.deferred == 3 and journal.live_count == 3
            assert broker.take_actions() == []  # the frames wait for the turn's end too
        assert broker.store.deferred == 0 and journal.live_count == 0
        actions = broker.take_actions()
        assert sum(a.data.count(b"MESSAGE\n") for a in actions if hasattr(a, "data")) == 3
        net.restart()
        again = net.connected_client()
        again.subscribe("/queue/d")
        again.subscribe("/queue/e", "s2")
        assert again.bodies() == []
