"""The live doctor's signatures on samples made by hand: samples in, findings out (no broker)."""

from __future__ import annotations

from typing import Any

from clients.doctor.live import Connection, Consumer, Destination, Sample, evaluate
from clients.doctor.live.read_http import jolokia_sample, rabbitmq_sample
from clients.doctor.live.read_stomp import activemq_sample, parse_map
from clients.doctor.live.watch import LiveReport, format_live_json, format_live_text, live_status
from clients.sources import SOURCES


def _starving(t: float, broker: str = "minibroker", memory_pct: int = 75, dispatched: int = 0) -> Sample:
    return Sample(
        t=t,
        broker=broker,
        memory_pct=memory_pct,
        memory_limit=64 * 1024 * 1024,
        destinations=(
            Destination(
                "/queue/A",
                "queue",
                size=50,
                enqueued=50,
                dequeued=0,
                dispatched=dispatched,
                consumers=1,
                memory_usage=0,
                memory_pct=0,
            ),
            Destination(
                "/queue/B",
                "queue",
                size=900,
                enqueued=900,
                dequeued=0,
                consumers=0,
                memory_usage=48 * 1024 * 1024,
                memory_pct=75,
            ),
        ),
    )


def test_starving_consumer_found_with_its_holders_and_fix() -> None:
    findings = evaluate([_starving(float(t)) for t in range(8)])
    assert [(f.pathology, f.subject) for f in findings] == [("starved_consumer", "/queue/A")]
    f = findings[0]
    assert f.culprits == ("/queue/B",)
    assert (f.start, f.end) == (0.0, 7.0) and len(f.series) == 7
    assert f.series[0][1]["broker_memory_pct"] == 75
    assert f.fix.source == "destination-limits" and f.fix.lab == "00-starving-consumers"
    assert 'queue = "B"' in f.fix.text and "memory_limit" in f.fix.text
    amq = evaluate([_starving(float(t), broker="activemq") for t in range(8)])[0]
    assert '<policyEntry queue="B" memoryLimit=' in amq.fix.text


def test_starving_needs_the_whole_window_and_the_mark() -> None:
    assert evaluate([_starving(float(t)) for t in range(4)]) == []  # 3 s: under the 5 s window
    assert evaluate([_starving(float(t), memory_pct=60) for t in range(8)]) == []  # under the mark
    assert evaluate([_starving(float(t), dispatched=t) for t in range(8)]) == []  # it receives


def _topic(t: float, memory_pct: int, dequeued: int) -> Sample:
    return Sample(
        t=t,
        broker="activemq",
        memory_pct=memory_pct,
        destinations=(
            Destination(
                "/topic/ticks",
                "topic",
                size=200,
                enqueued=300,
                dequeued=dequeued,
                consumers=4,
                inflight=10,
                producers=1,
                memory_pct=memory_pct,
            ),
        ),
    )


def test_slow_subscriber_and_stalled_subscriber_told_apart() -> None:
    slow = evaluate([_topic(float(t), 100, 40 * t) for t in range(7)])
    assert [f.pathology for f in slow] == ["slow_consumer"]
    assert 'topic="ticks"' in slow[0].fix.text and "fileCursor" in slow[0].fix.text
    stalled = evaluate([_topic(float(t), 100, 500) for t in range(7)])
    assert [f.pathology for f in stalled] == ["stalled_socket"]
    assert "soWriteTimeout" in stalled[0].fix.text
    assert evaluate([_topic(float(t), 60, 40 * t) for t in range(7)]) == []  # spooling: never full


def test_prefetch_full_while_acknowledging_slowly() -> None:
    def s(t: int, acked: int) -> Sample:
        return Sample(
            t=float(t),
            broker="minibroker",
            consumers=(Consumer("3/sub-0", "/queue/work", "3", prefetch=100, outstanding=100, acked=acked),),
        )

    found = evaluate([s(t, t) for t in range(7)])
    assert [f.pathology for f in found] == ["prefetch_full_slow_acks"]
    assert "queue_prefetch = 1" in found[0].fix.text
    assert evaluate([s(t, 50 * t) for t in range(7)]) == []  # it keeps up


def _rabbit(t: float, alarm: bool, redelivered: int = 0, acked: int = 2, messages: int = 3) -> Sample:
    return rabbitmq_sample(
        t,
        nodes=[{"name": "rabbit@x", "mem_used": 90, "mem_limit": 100, "mem_alarm": alarm, "disk_free_alarm": False}],
        queues=[
            {
                "name": "jobs",
                "vhost": "/",
                "messages": messages,
                "messages_unacknowledged": 1,
                "consumers": 1,
                "message_stats": {"publish": 10, "ack": acked, "redeliver": redelivered, "deliver_get": 5},
            }
        ],
        connections=[
            {"name": "127.0.0.1:5000 -> 127.0.0.1:5672", "user": "guest", "state": "blocked" if alarm else "running"},
            {"name": "127.0.0.1:5001 -> 127.0.0.1:5672", "user": "guest", "state": "running"},
        ],
        channels=[
            {
                "name": "127.0.0.1:5000 -> 127.0.0.1:5672 (1)",
                "connection_details": {"name": "127.0.0.1:5000 -> 127.0.0.1:5672"},
                "messages_unacknowledged": 1,
                "message_stats": {"publish": 10, "ack": 2},
            }
        ],
        consumers=[
            {
                "consumer_tag": "c1",
                "queue": {"name": "jobs"},
                "prefetch_count": 0,
                "ack_required": True,
                "channel_details": {
                    "name": "127.0.0.1:5000 -> 127.0.0.1:5672 (1)",
                    "connection_name": "127.0.0.1:5000 -> 127.0.0.1:5672",
                },
            }
        ],
    )


def test_rabbitmq_memory_alarm_names_the_blocked_connections() -> None:
    found = evaluate([_rabbit(float(t), alarm=True) for t in range(7)])
    names = sorted(f.pathology for f in found)
    assert names == ["blocked_holding_unacked", "resource_alarm"]
    alarm = next(f for f in found if f.pathology == "resource_alarm")
    assert alarm.culprits == ("127.0.0.1:5000 -> 127.0.0.1:5672",)
    assert "vm_memory_high_watermark" in alarm.fix.text and alarm.fix.source in SOURCES
    assert evaluate([_rabbit(float(t), alarm=False) for t in range(7)]) == []


def test_redelivery_loop_redelivered_and_never_acknowledged() -> None:
    found = evaluate([_rabbit(float(t), alarm=False, redelivered=3 * t) for t in range(7)])
    assert [(f.pathology, f.subject) for f in found] == [("redelivery_loop", "jobs")]
    assert "delivery-limit" in found[0].fix.text


def test_redelivery_loop_found_while_the_good_messages_around_it_are_acknowledged() -> None:
    samples = [_rabbit(float(t), alarm=False, redelivered=200 * t, acked=20 * t, messages=2) for t in range(7)]
    assert [(f.pathology, f.subject) for f in evaluate(samples)] == [("redelivery_loop", "jobs")]


def test_occasional_redeliveries_on_a_busy_queue_are_no_loop() -> None:
    # 5 a second among 100 messages: each would come back 3 times a minute, not more than 10.
    samples = [_rabbit(float(t), alarm=False, redelivered=5 * t, acked=50 * t, messages=100) for t in range(7)]
    assert evaluate(samples) == []


def test_activemq_plugin_map_read() -> None:
    body = (
        b"<map><entry><string>memoryPercentUsage</string><int>71</int></entry>"
        b"<entry><string>brokerName</string><string>b</string></entry></map>"
    )
    assert parse_map(body, "jms-map-xml") == {"memoryPercentUsage": 71, "brokerName": "b"}
    json_body = b'{"map":{"entry":[{"string":"size","long":5},{"string":["destinationName","queue://a"]}]}}'
    assert parse_map(json_body, "jms-map-json") == {"size": 5, "destinationName": "queue://a"}
    sample = activemq_sample(
        0.0,
        {"memoryPercentUsage": 71},
        [
            {"destinationName": "queue://a", "size": 5, "expiredCount": 2},
            {"destinationName": "topic://ActiveMQ.Advisory.X"},
            {"destinationName": "queue://ActiveMQ.DLQ", "size": 2},
        ],
    )
    assert [d.name for d in sample.destinations] == ["/queue/ActiveMQ.DLQ", "/queue/a"] and sample.memory_pct == 71
    assert sample.destinations[1].expired == 2


def test_report_text_json_and_status() -> None:
    findings = tuple(evaluate([_starving(float(t)) for t in range(8)]))
    report = LiveReport("stomp://127.0.0.1:61613", "minibroker", "0.1.0", 8, 7.0, findings, ())
    text = format_live_text(report)
    assert "starved_consumer" in text and "t=   1.0 s" in text and SOURCES["destination-limits"].title in text
    assert '"pathology": "starved_consumer"' in format_live_json(report)
    assert live_status(report) == 1
    assert live_status(LiveReport("x", "minibroker", "", 3, 2.0, (), ())) == 0
    assert "No problems found." in format_live_text(LiveReport("x", "minibroker", "", 3, 2.0, (), ()))


def test_connection_stalled_for_the_window() -> None:
    def s(t: int) -> Sample:
        return Sample(t=float(t), broker="minibroker", connections=(Connection("3 (127.0.0.1:1)", stalled=True),))

    assert [f.pathology for f in evaluate([s(t) for t in range(7)])] == ["stalled_socket"]


def test_temp_store_full_with_nothing_to_spool() -> None:
    def s(t: int, temp_pct: int) -> Sample:
        return Sample(
            t=float(t),
            broker="minibroker",
            temp_pct=temp_pct,
            memory_pct=10,
            destinations=(Destination("/topic/prices", "topic", size=0, enqueued=600, dequeued=2400, consumers=4),),
        )

    found = evaluate([s(t, 100) for t in range(7)])
    assert [f.pathology for f in found] == ["blocked_producer_idle_consumers"]
    assert 'temp_limit = "1 gb"' in found[0].fix.text and found[0].fix.lab == "01-temp-storage-deadlock"
    assert evaluate([s(t, 60) for t in range(7)]) == []


def _full_store(t: float, broker: str = "minibroker", **figures: Any) -> Sample:
    """A store pinned at its limit, a producer held, one message nobody reads in 16 files."""
    figures = {"store_pct": 100, "blocked_producers": 1, "store_files": 16, "store_files_with_live": 1, **figures}
    audit = Destination("/queue/audit", "queue", size=1, enqueued=1, dequeued=0, consumers=0)
    return Sample(t=t, broker=broker, destinations=(audit,), **figures)


def test_a_store_held_by_a_few_live_messages_and_what_is_not() -> None:
    [held] = evaluate([_full_store(float(t)) for t in range(7)])
    assert (held.pathology, held.culprits, held.fix.lab) == (
        "store_held_by_few_live",
        ("/queue/audit",),
        "06-journal-kept-alive",
    )
    assert "16 journal files kept, 15 of them with no live message" in held.headline
    for not_it in (
        {"store_files_with_live": 16},  # every file holds a live message: a store too small
        {"store_rings": 4},  # a ring store: its rings are reserved whole from the start
        {"blocked_producers": 0},  # nobody is held
        {"store_pct": 80},
    ):
        assert evaluate([_full_store(float(t), **not_it) for t in range(7)]) == [], not_it
    # ActiveMQ counts no journal files: the doctor takes 100 live messages as few
    amq = [
        _full_store(float(t), "activemq", store_files=None, store_files_with_live=None, blocked_producers=None)
        for t in range(7)
    ]
    [found] = evaluate(amq)
    assert "offlineDurableSubscriberTimeout" in found.fix.text and "journal files kept" not in found.headline


def _dead_letters(t: float, *queues: Destination, broker: str = "activemq") -> Sample:
    return Sample(t=t, broker=broker, destinations=queues)


def _dlq(name: str = "/queue/ActiveMQ.DLQ", enqueued: int = 51) -> Destination:
    return Destination(name, "queue", size=enqueued, enqueued=enqueued, dequeued=0, consumers=0, expired=0)


def _quotes(expired: int | None = 50) -> Destination:
    return Destination("/queue/prices", "queue", size=0, enqueued=50, dequeued=50, consumers=0, expired=expired)


def _orders() -> Destination:
    return Destination("/queue/orders", "queue", size=0, enqueued=41, dequeued=41, consumers=1, expired=0)


def test_a_failed_message_among_expired_ones_in_the_shared_dead_letter_queue() -> None:
    [found] = evaluate([_dead_letters(float(t), _dlq(), _quotes(), _orders()) for t in range(7)])
    assert (found.pathology, found.subject, found.culprits) == (
        "dead_letters_among_expired",
        "/queue/ActiveMQ.DLQ",
        ("/queue/prices",),
    )
    assert "1 message(s) that failed delivery among 50 that expired" in found.headline
    assert found.series[-1][1] == {"dead_letters": 51, "expired_elsewhere": 50, "failed_delivery": 1}
    assert 'processExpired="false"' in found.fix.text and found.fix.lab == "07-poison-message"
    [ours] = evaluate([_dead_letters(float(t), _dlq(), _quotes(), _orders(), broker="minibroker") for t in range(7)])
    assert 'dead_letter_strategy = "individual"' in ours.fix.text


def test_dead_letter_queues_that_mix_nothing() -> None:
    for queues in (
        (_dlq(enqueued=50), _quotes(), _orders()),  # only the expired quotes: nothing failed among them
        (_dlq(enqueued=1), _quotes(expired=0), _orders()),  # only the failed message: alone
        (_dlq("/queue/ActiveMQ.DLQ.Queue.orders", enqueued=1), _quotes(), _orders()),  # the queue's own
        (_dlq(), _quotes(expired=None), _orders()),  # a broker that counts no expiries
    ):
        assert evaluate([_dead_letters(float(t), *queues) for t in range(7)]) == [], queues


def test_jolokia_reads_journal_files_blocked_sends_expiries_and_dead_letter_queues() -> None:
    def mbean(name: str, kind: str = "Queue") -> str:
        return f"org.apache.activemq:brokerName=localhost,destinationName={name},destinationType={kind},type=Broker"

    broker = {"value": {"org.apache.activemq:brokerName=localhost,type=Broker": {"StorePercentUsage": 103}}}
    dests = {
        "value": {
            mbean("orders"): {"QueueSize": 0, "BlockedSends": 1, "ExpiredCount": 0},
            mbean("ActiveMQ.DLQ"): {"QueueSize": 51, "EnqueueCount": 51, "BlockedSends": 0},
            mbean("ActiveMQ.Advisory.Queue", "Topic"): {"QueueSize": 0},
        }
    }
    adapter = "org.apache.activemq:brokerName=localhost,instanceName=KahaDBPersistenceAdapter[/d],service=PersistenceAdapter,type=Broker"
    sample = jolokia_sample(0.0, broker, dests, {"value": {adapter: {"Data": "[1, 2, 3, 17]"}}})
    assert [d.name for d in sample.destinations] == ["/queue/ActiveMQ.DLQ", "/queue/orders"]
    assert (sample.store_pct, sample.store_files, sample.blocked_producers) == (103, 4, 1)
    assert sample.destination("/queue/orders") == Destination(
        "/queue/orders", "queue", size=0, enqueued=0, dequeued=0, consumers=0, expired=0
    )
    # a store that is not KahaDB's, and MBeans that count no blocked sends: not known
    bare = jolokia_sample(0.0, broker, {"value": {mbean("a"): {}}}, {"value": {adapter: {"Data": "jdbc"}}})
    assert (bare.store_files, bare.blocked_producers) == (None, None)


def test_a_store_held_over_jolokia_names_its_journal_files() -> None:
    samples = [_full_store(float(t), "activemq", store_files=17, store_files_with_live=None) for t in range(7)]
    [found] = evaluate(samples)
    assert "17 journal files kept" in found.headline and "with no live message" not in found.headline
