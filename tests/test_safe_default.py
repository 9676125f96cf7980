"""The embedded default configuration is the healthy one: a backlog no one
consumes never holds up the other destinations (the real server)."""

from __future__ import annotations

from minibroker.config import load_config
from wire import Wire

MEMORY_LIMIT = 1024 * 1024
BODY = b"x" * 10_000


def test_an_idle_queue_s_backlog_never_blocks_the_other_destinations(broker_factory) -> None:
    # The embedded default with less memory, so that "well past memory" is quick to send.
    rb = broker_factory(load_config(), system_usage={"memory_limit": MEMORY_LIMIT})
    producer, other = Wire(rb.address), Wire(rb.address)
    try:
        assert producer.connect().command == "CONNECTED" and other.connect().command == "CONNECTED"
        count = (
            3 * MEMORY_LIMIT // len(BODY)
        )  # three times the broker's memory, non-persistent, to a queue no one reads
        for _ in range(count - 1):
            producer.send("SEND", {"destination": "/queue/idle"}, BODY)
        producer.send("SEND", {"destination": "/queue/idle", "receipt": "last"}, BODY)
        assert producer.receipt("last").command == "RECEIPT"
        assert rb.call(lambda: rb.server.broker.destinations["/queue/idle"].size()) == count
        assert rb.call(lambda: rb.server.broker.memory.percent) < 100

        other.send("SEND", {"destination": "/queue/work", "receipt": "work"}, b"job")
        assert other.receipt("work").command == "RECEIPT"
        other.send("SUBSCRIBE", {"destination": "/queue/work", "id": "w"})
        assert other.until(lambda f: f.command == "MESSAGE").body == b"job"
    finally:
        producer.close()
        other.close()


def test_statistics_reach_their_asker_while_backlogs_fill_the_memory() -> None:
    """Two queues no one reads fill the broker's memory with persistent messages (the
    store cursor's cache). The statistics reply to a waiting consumer goes straight to
    it, not to the temp store to wait for memory that will not come to page it back."""
    import json

    from minibroker.edge import VirtualNetwork

    net = VirtualNetwork(load_config().replace(system_usage={"memory_limit": 100 * 1024}))
    producer = net.connected_client("producer")
    for queue in ("/queue/idle.1", "/queue/idle.2"):
        for _ in range(60):
            producer.send(queue, "x" * 1000, persistent="true")
    assert net.broker.memory.percent >= 100
    operator = net.connected_client("operator")
    operator.subscribe("/temp-queue/stats", "s")
    operator.send("/queue/ActiveMQ.Statistics.Broker", "", **{"reply-to": "/temp-queue/stats"})
    [reply] = operator.messages()
    assert json.loads(reply.body)["memoryPercentUsage"] >= 100
