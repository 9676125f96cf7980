"""``/metrics``: the broker's statistics in the Prometheus text format.

A ``prometheus_client`` collector that reads, at each scrape, the same
statistics the broker answers over STOMP (``Broker.statistics_source``, ``stats.statistics_replies``: the
Broker and Destination replies), so there is one statistics path; only the
journal's files, which no STOMP reply lists, are read from the store itself.
It runs on the broker's event loop, between two events, so every figure of one
scrape comes from the same moment.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from minibroker.ops import STATISTICS_PREFIX

if TYPE_CHECKING:
    from minibroker.core.broker import Broker

__all__ = ["BrokerCollector", "metrics_text"]

#: Broker-wide gauges: metric name, statistics key, help.
_BROKER_GAUGES = (
    ("minibroker_memory_usage_bytes", "memoryUsage", "Bytes of messages held in memory (ActiveMQ memoryUsage)"),
    ("minibroker_memory_limit_bytes", "memoryLimit", "The broker's memory limit (system_usage.memory_limit)"),
    ("minibroker_memory_usage_percent", "memoryPercentUsage", "Memory usage as a percent of its limit"),
    ("minibroker_store_usage_bytes", "storeUsage", "Bytes the persistent store takes (ActiveMQ storeUsage)"),
    ("minibroker_store_limit_bytes", "storeLimit", "The store's limit (system_usage.store_limit)"),
    ("minibroker_store_usage_percent", "storePercentUsage", "Store usage as a percent of its limit"),
    ("minibroker_temp_usage_bytes", "tempUsage", "Bytes the temp store takes (ActiveMQ tempUsage)"),
    ("minibroker_temp_limit_bytes", "tempLimit", "The temp store's limit (system_usage.temp_limit)"),
    ("minibroker_temp_usage_percent", "tempPercentUsage", "Temp usage as a percent of its limit"),
    ("minibroker_connections", "connectionCount", "Open client connections"),
    ("minibroker_blocked_producers", "blockedProducers", "SENDs held by producer flow control"),
    ("minibroker_destinations", "destinationCount", "Queues and topics"),
    ("minibroker_consumers", "consumerCount", "Subscriptions on all destinations"),
    ("minibroker_messages", "size", "Messages held on all destinations"),
)

#: Per-destination gauges (labels: destination, kind): metric name, statistics key, help.
_DESTINATION_GAUGES = (
    ("minibroker_destination_size", "size", "Messages held: waiting and delivered unacknowledged"),
    ("minibroker_destination_ready", "readyCount", "Messages waiting for a consumer"),
    ("minibroker_destination_unacknowledged", "inflightCount", "Messages delivered and not yet acknowledged"),
    ("minibroker_destination_enqueue_rate", "enqueueRate", "Messages in per second (last five seconds)"),
    ("minibroker_destination_dequeue_rate", "dequeueRate", "Messages out per second (last five seconds)"),
    ("minibroker_destination_consumers", "consumerCount", "Subscriptions on the destination"),
    ("minibroker_destination_memory_usage_bytes", "memoryUsage", "Bytes of the destination's messages in memory"),
    ("minibroker_destination_memory_usage_percent", "memoryPercentUsage", "Memory usage as a percent of its limit"),
    ("minibroker_destination_cached", "cachedCount", "Messages held in memory by the cursor"),
    ("minibroker_destination_store_only", "storeOnlyCount", "Messages only on disk (the cursor stopped caching)"),
    ("minibroker_destination_pending", "pendingCount", "Topics: messages its subscriptions hold for their consumers"),
    ("minibroker_destination_swapped", "swappedCount", "Topics: of those pending, how many are in the temp store"),
)

#: Per-destination counters: metric name (without _total), statistics key, help.
_DESTINATION_COUNTERS = (
    ("minibroker_destination_enqueued", "enqueueCount", "Messages sent to the destination"),
    ("minibroker_destination_dequeued", "dequeueCount", "Messages acknowledged or removed"),
    ("minibroker_destination_expired", "expiredCount", "Messages expired"),
)


class BrokerCollector:
    """A ``prometheus_client`` collector for one broker (call only on its event loop)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker_stats = (self.broker.statistics_source(self.broker, STATISTICS_PREFIX + "Broker", None) or [{}])[0]
        for name, key, doc in _BROKER_GAUGES:
            if key in broker_stats:
                yield GaugeMetricFamily(name, doc, value=float(broker_stats[key]))
        yield from self._destinations(
            self.broker.statistics_source(self.broker, STATISTICS_PREFIX + "Destination.>", None) or []
        )
        yield from self._journals()

    def _destinations(self, replies: list[dict[str, Any]]) -> Iterator[Metric]:
        labels = ["destination", "kind"]
        for name, key, doc in _DESTINATION_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=labels)
            for d in replies:
                if key in d:
                    family.add_metric([d["destinationName"], d["kind"]], float(d[key]))
            yield family
        for name, key, doc in _DESTINATION_COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=labels)
            for d in replies:
                counter.add_metric([d["destinationName"], d["kind"]], float(d[key]))
            yield counter

    def _journals(self) -> Iterator[Metric]:
        store = self.broker.store
        files = [f for journal in store.journals() for f in journal.files()] if store is not None else []
        yield GaugeMetricFamily("minibroker_journal_files", "Journal files on disk", value=len(files))
        yield GaugeMetricFamily(
            "minibroker_journal_bytes",
            "Bytes of the journal files (preallocated size)",
            value=sum(f.size for f in files),
        )
        yield GaugeMetricFamily(
            "minibroker_journal_used_bytes",
            "Bytes of records written in the journal files",
            value=sum(f.used for f in files),
        )


def metrics_text(broker: Broker) -> bytes:
    """One scrape: every metric of ``broker`` in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))  # type: ignore[arg-type]
    return generate_latest(registry)
