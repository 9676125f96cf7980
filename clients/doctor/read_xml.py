"""Reading a subset of ActiveMQ's ``activemq.xml`` onto our configuration model.

What is read (element names without their namespace, wherever the
``<broker>`` element sits, usually inside Spring's ``<beans>``):

- ``<broker persistent brokerName offlineDurableSubscriberTimeout offlineDurableSubscriberTaskSchedule>``;
- ``<systemUsage>``: ``memoryUsage`` ``limit`` or ``percentOfJvmHeap``,
  ``storeUsage`` and ``tempUsage`` ``limit`` (``percentLimit`` is noted, not
  checked); sizes in ActiveMQ's syntax (``"64 mb"``, ``"1gb"``, ``65536``);
- ``<persistenceAdapter>``: ``kahaDB journalMaxFileLength``,
  ``journalDiskSyncStrategy`` and the ack compaction's ``compactAcksAfterNoGC``
  (with ``enableAckCompaction``), ``compactAcksIgnoresStoreGrowth``,
  ``cleanupInterval`` and ``checkpointInterval``;
- ``<tempDataStore>``: any element with ``journalMaxFileLength``
  (``pListStoreImpl``);
- ``<destinationPolicy>``: each ``policyEntry`` (and ``policyMap
  defaultEntry``) with ``queue``/``topic``, the attributes of
  ``spell_xml.POLICY_ATTRIBUTES``, ``pendingSubscriberPolicy``
  (``vmCursor``/``fileCursor``), ``pendingMessageLimitStrategy``
  (``constantPendingMessageLimitStrategy limit``,
  ``prefetchRatePendingMessageLimitStrategy multiplier``),
  ``messageEvictionStrategy`` (``oldestMessageEvictionStrategy``),
  ``slowConsumerStrategy`` (``abortSlowConsumerStrategy``,
  ``abortSlowAckConsumerStrategy``), ``deadLetterStrategy`` (shared,
  individual, discarding: ``processExpired``, ``processNonPersistent``, the
  shared queue's name);
- ``<plugins>``: the ``redeliveryPlugin``'s ``redeliveryPolicy`` entries, each
  into the queue policy entry of the same pattern;
- ``<transportConnectors>``: every STOMP connector (``stomp``, ``stomp+nio``,
  ``stomp+ssl`` ...) with the URI options of ``spell_xml.LISTENER_OPTIONS``
  and the ``allowLinkStealing`` attribute (``transport.hbGracePeriodMultiplier``
  is 1.0 when not set, ActiveMQ's default).

What is not set takes ActiveMQ's defaults, which are not all ours: memory
1 gb, store 100 gb, temp 50 gb, and topic subscriptions on the file cursor
(the VM cursor on a non-persistent broker). Everything else is ignored.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from minibroker.config import (
    BrokerConfig,
    BrokerSection,
    PolicyEntry,
    StoreConfig,
    SystemUsageConfig,
    TransportConfig,
    heart_beat,
    parse_size,
)

from .model import INFO, DoctorError, Finding, Listener, Setup, human_size
from .spell_xml import (
    DEAD_LETTER_ELEMENTS,
    KAHADB_INTERVALS,
    LISTENER_OPTIONS,
    POLICY_ATTRIBUTES,
    REDELIVERY_ATTRIBUTES,
    XmlSyntax,
)

__all__ = ["read_xml", "ASSUMED_HEAP", "ACTIVEMQ_DEFAULTS"]

GB = 1024**3
#: ActiveMQ's start script runs the broker with -Xmx1G.
ASSUMED_HEAP = GB
#: ActiveMQ's BrokerService defaults for ``<systemUsage>``.
ACTIVEMQ_DEFAULTS = {"memory_limit": GB, "store_limit": 100 * GB, "temp_limit": 50 * GB}


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _children(element: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in element if _local(c.tag) == name]


def _first(element: ET.Element | None, *path: str) -> ET.Element | None:
    for name in path:
        if element is None:
            return None
        found = _children(element, name)
        element = found[0] if found else None
    return element


def _descendants(element: ET.Element | None, name: str) -> Iterator[ET.Element]:
    if element is not None:
        yield from (e for e in element.iter() if _local(e.tag) == name)


def _show(element: ET.Element, *attributes: str) -> str:
    attrs = "".join(f' {a}="{element.get(a)}"' for a in attributes if element.get(a) is not None)
    return f"<{_local(element.tag)}{attrs}/>"


# ------------------------------------------------------------------ values
def _value(raw: str, where: str, parse: Callable[[str], Any], expected: str) -> Any:
    if "${" in raw:
        raise DoctorError(f"{where} is {raw!r}: doctor does not resolve ${{...}} placeholders; write the value itself")
    try:
        return parse(raw.strip())
    except ValueError:
        raise DoctorError(f"bad value for {where}: {raw!r} (expected {expected})") from None


def _size(raw: str, where: str) -> int:
    return _value(raw, where, parse_size, 'a size such as 65536 or "64 mb"')


def _int(raw: str, where: str, low: int = 0) -> int:
    def parse(text: str) -> int:
        n = int(text)
        if n < low:
            raise ValueError(text)
        return n

    return _value(raw, where, parse, f"an integer of {low} or more")


def _bool(raw: str, where: str) -> bool:
    def parse(text: str) -> bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(text)
        return text.lower() == "true"

    return _value(raw, where, parse, "true or false")


def _percent(raw: str, where: str) -> int:
    def parse(text: str) -> int:
        n = int(text)
        if not 1 <= n <= 100:
            raise ValueError(text)
        return n

    return _value(raw, where, parse, "a percent from 1 to 100")


_POLICY_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "memory_limit": _size,
    "cursor_memory_high_water_mark": _percent,
    "producer_flow_control": _bool,
    "send_fail_if_no_space": _bool,
    "send_fail_if_no_space_after_timeout": _int,
    "queue_prefetch": lambda raw, where: _int(raw, where, 0),
    "topic_prefetch": lambda raw, where: _int(raw, where, 0),
    "durable_topic_prefetch": lambda raw, where: _int(raw, where, 0),
    "queue_browser_prefetch": lambda raw, where: _int(raw, where, 0),
    "max_page_size": lambda raw, where: _int(raw, where, 1),
    "prioritized_messages": _bool,
    "expire_messages_period": _int,
}


#: KahaDB's journalDiskSyncStrategy -> our ``store.fsync``.
_SYNC_STRATEGIES = {"always": "always", "periodic": "batch", "never": "never"}


# ------------------------------------------------------------------ sections
class _Reader:
    """Collects values, what the file set (``written``) and notes while reading."""

    def __init__(self, heap: int | None) -> None:
        self.heap = heap
        self.written: dict[str, str] = {}
        self.unknown: set[str] = set()
        self.notes: list[Finding] = []

    def system_usage(self, broker: ET.Element) -> SystemUsageConfig:
        outer = _first(broker, "systemUsage")
        inner = _first(outer, "systemUsage")
        usage = inner if inner is not None else outer
        values = dict(ACTIVEMQ_DEFAULTS)
        for element_name, key in (
            ("memoryUsage", "memory_limit"),
            ("storeUsage", "store_limit"),
            ("tempUsage", "temp_limit"),
        ):
            element = next((e for e in _descendants(usage, element_name) if e.attrib), None)
            if element is None:
                continue
            full = f"system_usage.{key}"
            where = f"<{element_name} limit>"
            if element.get("limit") is not None:
                values[key] = _size(element.get("limit", ""), where)
                self.written[full] = _show(element, "limit")
            elif key == "memory_limit" and element.get("percentOfJvmHeap") is not None:
                percent = _percent(element.get("percentOfJvmHeap", ""), "<memoryUsage percentOfJvmHeap>")
                heap = self.heap or ASSUMED_HEAP
                values[key] = heap * percent // 100
                self.written[full] = (
                    f"{_show(element, 'percentOfJvmHeap')} (= {human_size(values[key])} of a {human_size(heap)} heap)"
                )
                if self.heap is None:
                    self.notes.append(
                        Finding(
                            "heap-assumed",
                            INFO,
                            None,
                            f"memory limit is {percent}% of the JVM heap: a {human_size(heap)} heap is assumed",
                            (self.written[full],),
                            "ActiveMQ's start script runs the broker with -Xmx1G; the memory checks use that heap.",
                            "pass --heap SIZE (your -Xmx) to check against your real heap",
                        )
                    )
            elif element.get("percentLimit") is not None:
                self.unknown.add(full)
                self.written[full] = f"{_show(element, 'percentLimit')} (a percent of the disk: not checked)"
        return SystemUsageConfig(**values)

    def store(self, broker: ET.Element, persistent: bool) -> StoreConfig:
        values: dict[str, Any] = {}
        adapter = _first(broker, "persistenceAdapter")
        kaha = next((e for e in _descendants(adapter, "kahaDB")), None)
        if kaha is not None and kaha.get("journalMaxFileLength") is not None:
            values["journal_max_file_length"] = _size(
                kaha.get("journalMaxFileLength", ""), "<kahaDB journalMaxFileLength>"
            )
            self.written["store.journal_max_file_length"] = _show(kaha, "journalMaxFileLength")
        if kaha is not None and kaha.get("journalDiskSyncStrategy") is not None:
            strategy = kaha.get("journalDiskSyncStrategy", "").strip().lower()
            if strategy not in _SYNC_STRATEGIES:
                raise DoctorError(
                    f"bad value for <kahaDB journalDiskSyncStrategy>: {strategy!r} (expected always, periodic or never)"
                )
            values["fsync"] = _SYNC_STRATEGIES[strategy]
            self.written["store.fsync"] = _show(kaha, "journalDiskSyncStrategy")
        elif adapter is not None and kaha is None:
            self.unknown.add("store.journal_max_file_length")  # JDBC, LevelDB ...: no journal files to compare
        if kaha is not None and kaha.get("compactAcksAfterNoGC") is not None:
            enabled = _bool(kaha.get("enableAckCompaction", "true"), "<kahaDB enableAckCompaction>")
            after = _int(kaha.get("compactAcksAfterNoGC", ""), "<kahaDB compactAcksAfterNoGC>")
            values["compact_acks_after_no_gc"] = after if enabled else 0
            self.written["store.compact_acks_after_no_gc"] = _show(kaha, "enableAckCompaction", "compactAcksAfterNoGC")
        if kaha is not None and kaha.get("compactAcksIgnoresStoreGrowth") is not None:
            values["compact_acks_ignores_store_growth"] = _bool(
                kaha.get("compactAcksIgnoresStoreGrowth", ""), "<kahaDB compactAcksIgnoresStoreGrowth>"
            )
            self.written["store.compact_acks_ignores_store_growth"] = _show(kaha, "compactAcksIgnoresStoreGrowth")
        for key, attribute in KAHADB_INTERVALS.items():
            if kaha is not None and kaha.get(attribute) is not None:
                values[key] = _int(kaha.get(attribute, ""), f"<kahaDB {attribute}>", 1)
                self.written[f"store.{key}"] = _show(kaha, attribute)
        temp = _first(broker, "tempDataStore")
        plist = next((e for e in (temp if temp is not None else []) if e.get("journalMaxFileLength") is not None), None)
        if plist is not None:
            values["temp_journal_max_file_length"] = _size(
                plist.get("journalMaxFileLength", ""), f"<{_local(plist.tag)} journalMaxFileLength>"
            )
            self.written["store.temp_journal_max_file_length"] = _show(plist, "journalMaxFileLength")
        if not persistent:
            self.written["broker.persistent"] = '<broker persistent="false">'
        return StoreConfig(**values)

    # -------------------------------------------------------------- policies
    def policy(self, element: ET.Element, index: int | None, persistent: bool) -> PolicyEntry | None:
        kind = "queue" if element.get("queue") is not None else "topic" if element.get("topic") is not None else None
        if kind is None:
            return None  # tempQueue/tempTopic entries: not read
        pattern = element.get(kind, "")
        tag = f'<policyEntry {kind}="{pattern}">'
        values: dict[str, Any] = {kind: pattern, "pending_cursor": "vm" if not persistent else "file"}
        prefix = f"destination_policy[{index}]." if index is not None else "default_policy."
        for key, attribute in POLICY_ATTRIBUTES.items():
            raw = element.get(attribute)
            if raw is not None:
                values[key] = _POLICY_PARSERS[key](raw, f"{tag} {attribute}")
                self.written[prefix + key] = f'{attribute}="{raw}"'
        cursor = _first(element, "pendingSubscriberPolicy")
        for child in cursor if cursor is not None else []:
            if _local(child.tag) in ("vmCursor", "fileCursor"):
                values["pending_cursor"] = "vm" if _local(child.tag) == "vmCursor" else "file"
                self.written[prefix + "pending_cursor"] = f"<pendingSubscriberPolicy><{_local(child.tag)}/>"
        limit = _first(element, "pendingMessageLimitStrategy")
        for child in limit if limit is not None else []:
            name = _local(child.tag)
            if name == "constantPendingMessageLimitStrategy":
                values["pending_message_limit"] = _int(child.get("limit", "-1"), f"{tag} <{name} limit>", -1)
                self.written[prefix + "pending_message_limit"] = _show(child, "limit")
            elif name == "prefetchRatePendingMessageLimitStrategy":
                multiplier = _value(child.get("multiplier", "1"), f"{tag} <{name} multiplier>", float, "a number")
                values["pending_message_limit"] = max(0, int(multiplier * values.get("topic_prefetch", 32767)))
                self.written[prefix + "pending_message_limit"] = _show(child, "multiplier")
        eviction = _first(element, "messageEvictionStrategy")
        for child in eviction if eviction is not None else []:
            if _local(child.tag) == "oldestMessageEvictionStrategy":
                values["message_eviction_strategy"] = "oldest"
                self.written[prefix + "message_eviction_strategy"] = _show(child)
        dead = _first(element, "deadLetterStrategy")
        for child in dead if dead is not None else []:
            name = _local(child.tag)
            strategy = {v: k for k, v in DEAD_LETTER_ELEMENTS.items()}.get(name)
            if strategy is None:
                continue
            values["dead_letter_strategy"] = strategy
            self.written[prefix + "dead_letter_strategy"] = _show(child, *child.attrib)
            for key, attribute in (
                ("process_expired", "processExpired"),
                ("process_non_persistent", "processNonPersistent"),
            ):
                if child.get(attribute) is not None:
                    values[key] = _bool(child.get(attribute, ""), f"{tag} <{name} {attribute}>")
            queue = _first(child, "deadLetterQueue", "queue")
            if queue is not None and queue.get("physicalName"):
                values["dead_letter_queue"] = queue.get("physicalName")
        slow = _first(element, "slowConsumerStrategy")
        for child in slow if slow is not None else []:
            name = _local(child.tag)
            if name in ("abortSlowConsumerStrategy", "abortSlowAckConsumerStrategy"):
                values["abort_slow_consumer"] = True
                self.written[prefix + "abort_slow_consumer"] = _show(child, *child.attrib)
                for key, attribute, parse in (
                    ("max_slow_count", "maxSlowCount", lambda r, w: _int(r, w, -1)),
                    ("max_slow_duration", "maxSlowDuration", _int),
                    ("abort_slow_consumer_check_period", "checkPeriod", lambda r, w: _int(r, w, 1)),
                    ("abort_connection", "abortConnection", _bool),
                ):
                    if child.get(attribute) is not None:
                        values[key] = parse(child.get(attribute, ""), f"{tag} <{name} {attribute}>")
        return PolicyEntry(**values)

    def redelivery(self, broker: ET.Element, entry: PolicyEntry, index: int) -> PolicyEntry:
        """``entry`` with the redeliveryPlugin's <redeliveryPolicy> for the same queues, if any."""
        plugin = next(_descendants(_first(broker, "plugins"), "redeliveryPlugin"), None)
        for policy in _descendants(plugin, "redeliveryPolicy"):
            if entry.kind != "queue" or policy.get("queue") != entry.pattern:
                continue
            tag = f'<redeliveryPolicy queue="{entry.pattern}">'
            values: dict[str, Any] = {}
            for key, attribute in REDELIVERY_ATTRIBUTES.items():
                raw = policy.get(attribute)
                if raw is None:
                    continue
                if key == "use_exponential_back_off":
                    values[key] = _bool(raw, f"{tag} {attribute}")
                elif key == "back_off_multiplier":
                    values[key] = _value(raw, f"{tag} {attribute}", float, "a number")
                else:
                    values[key] = _int(raw, f"{tag} {attribute}", -1)
                self.written[f"destination_policy[{index}].{key}"] = f'{attribute}="{raw}"'
            return dataclasses.replace(entry, **values)
        return entry

    # -------------------------------------------------------------- connectors
    def listener(self, element: ET.Element) -> Listener | None:
        uri = element.get("uri", "")
        scheme = uri.partition("://")[0].lower()
        if "stomp" not in scheme.split("+"):
            return None
        name = element.get("name") or uri
        where = f'<transportConnector name="{name}">'
        options = {key: value for key, _, value in (p.partition("=") for p in uri.partition("?")[2].split("&") if p)}
        values: dict[str, Any] = {}
        parsers: dict[str, Callable[[str, str], Any]] = {
            "so_write_timeout": _int,
            "connect_timeout": _int,
            "default_heart_beat": lambda raw, w: _value(
                raw, w, heart_beat, 'two millisecond counts such as "10000,10000"'
            ),
            "max_frame_size": _size,
            "max_data_length": _size,
            "allow_link_stealing": _bool,
            "hb_grace_period_multiplier": lambda raw, w: _value(raw, w, float, "a number such as 1.5"),
        }
        for key, parse in parsers.items():
            option = LISTENER_OPTIONS[key]
            raw = options.get(option)
            if key == "allow_link_stealing":
                raw = element.get(
                    "allowLinkStealing", options.get("allowLinkStealing", options.get("transport.allowLinkStealing"))
                )
            if raw is not None:
                values[key] = parse(raw, f"{where} {option}")
                self.written[f"listener[{name}].{key}"] = f"{option}={raw}"
        values.setdefault("hb_grace_period_multiplier", 1.0)  # ActiveMQ's default multiplier is 1.0
        transport = TransportConfig(**values)
        return Listener(name, transport, uri)


def _broker_element(root: ET.Element) -> ET.Element | None:
    return next((e for e in root.iter() if _local(e.tag) == "broker"), None)


def read_xml(path: str | Path, data: bytes, heap: int | None = None) -> Setup:
    """An ActiveMQ configuration file's bytes as a ``Setup`` (``heap``: the JVM's -Xmx, for percentOfJvmHeap)."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise DoctorError(f"'{path}' is not well-formed XML: {exc}") from None
    broker = _broker_element(root)
    if broker is None:
        raise DoctorError(f"'{path}' has no <broker> element: not an ActiveMQ configuration")
    reader = _Reader(heap)
    persistent = _bool(broker.get("persistent", "true"), "<broker persistent>")
    entries: list[PolicyEntry] = []
    policy_map = _first(broker, "destinationPolicy", "policyMap")
    for element in _descendants(_first(policy_map, "policyEntries"), "policyEntry"):
        entry = reader.policy(element, len(entries), persistent)
        if entry is not None:
            entries.append(entry)
    entries = [reader.redelivery(broker, entry, i) for i, entry in enumerate(entries)]
    default_element = _first(policy_map, "defaultEntry", "policyEntry")
    default_policy = PolicyEntry(pending_cursor="file" if persistent else "vm")
    if default_element is not None:
        default_element.attrib.setdefault("queue", ">")  # only the options matter for the default entry
        default_policy = reader.policy(default_element, None, persistent) or default_policy
    listeners = [reader.listener(e) for e in _descendants(_first(broker, "transportConnectors"), "transportConnector")]
    config = BrokerConfig(
        broker=BrokerSection(
            name=broker.get("brokerName", "localhost"),
            persistent=persistent,
            offline_durable_subscriber_timeout=int(broker.get("offlineDurableSubscriberTimeout", "-1")),
            offline_durable_subscriber_task_schedule=int(broker.get("offlineDurableSubscriberTaskSchedule", "300000")),
        ),
        system_usage=reader.system_usage(broker),
        store=reader.store(broker, persistent),
        destination_policy=tuple(entries),
    )
    return Setup(
        source=str(path),
        syntax=XmlSyntax(),
        config=config,
        default_policy=default_policy,
        listeners=tuple(x for x in listeners if x is not None),
        explicit=frozenset(reader.written),
        unknown=frozenset(reader.unknown),
        written=reader.written,
        notes=tuple(reader.notes),
    )
