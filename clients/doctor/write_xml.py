"""Writing our configuration as ActiveMQ's ``activemq.xml``: the reverse of ``read_xml``.

``lab run --against activemq`` starts ActiveMQ Classic with the equivalent of a
run's TOML. Every option ``read_xml`` reads is written so that ``read_xml``
reads the same value back (tests/doctor/test_doctor_write_xml.py checks it on every
lab's configuration): the three ``<systemUsage>`` limits (always written: ActiveMQ's
defaults are not ours), ``brokerName`` and ``persistent``, KahaDB's and the temp
store's journal file sizes, KahaDB's cleanup and checkpoint intervals, each ``[[destination_policy]]`` as a
``<policyEntry>``, and the STOMP listener as a ``<transportConnector>`` with its
URI options.

What ActiveMQ cannot be told is not written but returned as a ``Departure``
(the option, its value, and why), so the caller can say so: the legacy
space check (ActiveMQ 5.14 and older only), a slow store on purpose, the vm
cursor for a queue's non-persistent messages only, evicting the newest
message, Qpid's ring journal, and options ActiveMQ sets elsewhere (users, a
redelivery delay under the redeliveryPlugin's one second). The redelivery
options go to the broker's ``redeliveryPlugin`` (with ``schedulerSupport``),
the dead letter options to each entry's ``<deadLetterStrategy>``. Options left at our defaults are not written unless ActiveMQ's
default differs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from minibroker.config import BrokerConfig, PolicyEntry, StoreConfig, TransportConfig

from .spell_xml import (
    DEAD_LETTER_ELEMENTS,
    KAHADB_INTERVALS,
    LISTENER_OPTIONS,
    POLICY_ATTRIBUTES,
    REDELIVERY_ATTRIBUTES,
    quoteattr,
    xml_value,
)

__all__ = ["Departure", "ActiveMQXml", "write_xml"]

_POLICY_DEFAULTS = PolicyEntry()
_STORE_DEFAULTS = StoreConfig()
_TRANSPORT_DEFAULTS = TransportConfig()

#: KahaDB's journalDiskSyncStrategy for our ``store.fsync``.
_SYNC_STRATEGY = {"always": "always", "batch": "periodic", "never": "never"}

#: Policy options written as something other than an attribute (or not at all).
_POLICY_ELEMENTS = {
    "pending_cursor",
    "pending_message_limit",
    "message_eviction_strategy",
    "abort_slow_consumer",
    "max_slow_count",
    "max_slow_duration",
    "abort_slow_consumer_check_period",
    "abort_connection",
}

#: Policy options ActiveMQ takes in another place or not at all (the redelivery options where
#: the redeliveryPlugin cannot carry them: ``_Writer.redelivery``).
_POLICY_ELSEWHERE = {
    "dead_letter_on_nack": "ActiveMQ's STOMP NACK always dead-letters after the redelivery policy",
    "blocked_producer_warning_interval": "not written here",
}
#: The dead letter options: a <deadLetterStrategy> in the policy entry.
_DEAD_LETTER_OPTIONS = ("dead_letter_strategy", "dead_letter_queue", "process_non_persistent", "process_expired")
#: The individual strategy's prefixes (as ours names the queues: ActiveMQ.DLQ.Queue.<name>).
INDIVIDUAL_PREFIXES = {"queuePrefix": "ActiveMQ.DLQ.Queue.", "topicPrefix": "ActiveMQ.DLQ.Topic."}
#: The redeliveryPlugin refuses to start with a delay shorter than this (ms): it redelivers
#: through the scheduler, and a shorter delay could resend a message before its poison ack is done.
PLUGIN_MIN_DELAY = 1000


@dataclass(frozen=True)
class Departure:
    """An option of ours ActiveMQ's file does not carry, and why."""

    key: str
    value: object
    why: str

    @property
    def option(self) -> str:
        """The option's own name (``space_check``), without its section or entry."""
        return self.key.rsplit(".", 1)[-1]

    def describe(self) -> str:
        """``space_check = "legacy": why`` (the same for every entry that sets it)."""
        return f"{self.option} = {_toml_value(self.value)}: {self.why}"


@dataclass(frozen=True)
class ActiveMQXml:
    """The generated ``activemq.xml`` and what it could not say."""

    text: str
    departures: tuple[Departure, ...]

    def departs(self, option: str) -> list[Departure]:
        """The departures of one option (``space_check``), whichever entry they are in."""
        return [d for d in self.departures if d.option == option]


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _changed(entry: object, defaults: object, name: str) -> bool:
    return bool(getattr(entry, name) != getattr(defaults, name))


class _Writer:
    def __init__(self) -> None:
        self.departures: list[Departure] = []

    def depart(self, key: str, value: object, why: str) -> None:
        self.departures.append(Departure(key, value, why))

    # ---------------------------------------------------------------- sections
    def store(self, store: StoreConfig) -> list[str]:
        kaha = {"directory": "${activemq.data}/kahadb"}
        if _changed(store, _STORE_DEFAULTS, "journal_max_file_length"):
            kaha["journalMaxFileLength"] = xml_value("journal_max_file_length", store.journal_max_file_length)
        if store.fsync != "always":
            kaha["journalDiskSyncStrategy"] = _SYNC_STRATEGY[store.fsync]
        if store.compact_acks_after_no_gc:  # (ActiveMQ's default, 10 checkpoints of 30 s, is left as it is)
            kaha["enableAckCompaction"] = "true"
            kaha["compactAcksAfterNoGC"] = str(store.compact_acks_after_no_gc)
            kaha["compactAcksIgnoresStoreGrowth"] = xml_value(
                "compact_acks_ignores_store_growth", store.compact_acks_ignores_store_growth
            )
        for key, attribute in KAHADB_INTERVALS.items():  # (ActiveMQ's defaults are ours: written when changed)
            if _changed(store, _STORE_DEFAULTS, key):
                kaha[attribute] = str(getattr(store, key))
        if store.layout != "growing":
            self.depart("store.layout", store.layout, "Qpid's ring journal: ActiveMQ's KahaDB journal grows")
        if store.store_latency:
            self.depart(
                "store.store_latency",
                store.store_latency,
                "a slow store on purpose; ActiveMQ has no such setting, its KahaDB is as fast as this disk",
            )
        plist = {
            "directory": "${activemq.data}/tmp_storage",
            # in bytes: the schema types this attribute as an integer, with no "1 mb" sizes
            "journalMaxFileLength": str(store.temp_journal_max_file_length),
        }
        return [
            "<persistenceAdapter>",
            f"  <kahaDB{_attributes(kaha)}/>",
            "</persistenceAdapter>",
            "<tempDataStore>",
            f"  <pListStoreImpl{_attributes(plist)}/>",
            "</tempDataStore>",
        ]

    def usage(self, config: BrokerConfig) -> list[str]:
        lines = ["<systemUsage>", "  <systemUsage>"]
        for element, key in (
            ("memoryUsage", "memory_limit"),
            ("storeUsage", "store_limit"),
            ("tempUsage", "temp_limit"),
        ):
            value = xml_value(key, getattr(config.system_usage, key))
            lines += [f"    <{element}>", f"      <{element} limit={quoteattr(value)}/>", f"    </{element}>"]
        return lines + ["  </systemUsage>", "</systemUsage>"]

    # ---------------------------------------------------------------- policies
    def policy(self, entry: PolicyEntry, index: int) -> list[str]:
        where = f"destination_policy[{index}]"
        attrs = {"queue" if entry.kind == "queue" else "topic": entry.pattern}
        for key, attribute in POLICY_ATTRIBUTES.items():
            if _changed(entry, _POLICY_DEFAULTS, key):
                attrs[attribute] = xml_value(key, getattr(entry, key))
        for f in dataclasses.fields(PolicyEntry):
            if f.name in _POLICY_ELSEWHERE and _changed(entry, _POLICY_DEFAULTS, f.name):
                self.depart(f"{where}.{f.name}", getattr(entry, f.name), _POLICY_ELSEWHERE[f.name])
        if entry.space_check == "legacy":
            self.depart(
                f"{where}.space_check",
                "legacy",
                "ActiveMQ 5.14 and older (a cursor stops caching when any ancestor usage passes 70%); "
                "5.15 and later have only the current check (AMQ-4467): run it on a 5.14 broker",
            )
        children = self.dead_letter(entry)
        if entry.kind == "topic":
            cursor = "vmCursor" if entry.pending_cursor == "vm" else "fileCursor"
            children += ["<pendingSubscriberPolicy>", f"  <{cursor}/>", "</pendingSubscriberPolicy>"]
        elif entry.pending_cursor == "vm":
            self.depart(
                f"{where}.pending_cursor",
                "vm",
                "a queue's non-persistent messages kept in memory; ActiveMQ's store cursor swaps them "
                "to the temp store (its vmQueueCursor would keep the persistent ones in memory too)",
            )
        if entry.pending_message_limit >= 0:
            children += [
                "<pendingMessageLimitStrategy>",
                f'  <constantPendingMessageLimitStrategy limit="{entry.pending_message_limit}"/>',
                "</pendingMessageLimitStrategy>",
            ]
            if entry.message_eviction_strategy == "oldest":
                children += [
                    "<messageEvictionStrategy>",
                    "  <oldestMessageEvictionStrategy/>",
                    "</messageEvictionStrategy>",
                ]
            else:
                self.depart(
                    f"{where}.message_eviction_strategy",
                    entry.message_eviction_strategy,
                    "ActiveMQ's strategies evict the oldest message (or by priority or a property), never the newest",
                )
        if entry.abort_slow_consumer:
            abort = {
                "maxSlowCount": str(entry.max_slow_count),
                "maxSlowDuration": str(entry.max_slow_duration),
                "checkPeriod": str(entry.abort_slow_consumer_check_period),
                "abortConnection": xml_value("abort_connection", entry.abort_connection),
            }
            children += [
                "<slowConsumerStrategy>",
                f"  <abortSlowConsumerStrategy{_attributes(abort)}/>",
                "</slowConsumerStrategy>",
            ]
        head = "<policyEntry" + _attributes(attrs)
        if not children:
            return [head + "/>"]
        return [head + ">", *("  " + line for line in children), "</policyEntry>"]

    def dead_letter(self, entry: PolicyEntry) -> list[str]:
        """The entry's <deadLetterStrategy>, when it says anything but ActiveMQ's default (one
        shared ActiveMQ.DLQ that takes expired messages and drops non-persistent ones)."""
        if not any(_changed(entry, _POLICY_DEFAULTS, key) for key in _DEAD_LETTER_OPTIONS):
            return []
        element = DEAD_LETTER_ELEMENTS[entry.dead_letter_strategy]
        attrs: dict[str, str] = {}
        if entry.dead_letter_strategy != "discard":
            attrs = {
                "processExpired": xml_value("process_expired", entry.process_expired),
                "processNonPersistent": xml_value("process_non_persistent", entry.process_non_persistent),
            }
        if entry.dead_letter_strategy == "individual":
            attrs = INDIVIDUAL_PREFIXES | {"useQueueForQueueMessages": "true"} | attrs
        if entry.dead_letter_strategy == "shared" and _changed(entry, _POLICY_DEFAULTS, "dead_letter_queue"):
            inner = [
                f"  <{element}{_attributes(attrs)}>",
                "    <deadLetterQueue>",
                f"      <queue physicalName={quoteattr(entry.dead_letter_queue)}/>",
                "    </deadLetterQueue>",
                f"  </{element}>",
            ]
        else:
            inner = [f"  <{element}{_attributes(attrs)}/>"]
        return ["<deadLetterStrategy>", *inner, "</deadLetterStrategy>"]

    def redelivery(self, entry: PolicyEntry, index: int) -> str | None:
        """The entry's <redeliveryPolicy> for the redeliveryPlugin, or None (a departure for each
        redelivery option it sets) when the plugin cannot carry it: without the plugin ActiveMQ
        dead-letters a STOMP NACK at once, and the plugin takes no delay under PLUGIN_MIN_DELAY."""
        changed = [key for key in REDELIVERY_ATTRIBUTES if _changed(entry, _POLICY_DEFAULTS, key)]
        if not changed:
            return None
        later = entry.redelivery_delay or entry.initial_redelivery_delay
        if entry.kind == "queue" and min(entry.initial_redelivery_delay, later) >= PLUGIN_MIN_DELAY:
            attrs = {"queue": entry.pattern} | {
                attribute: xml_value(key, getattr(entry, key)) for key, attribute in REDELIVERY_ATTRIBUTES.items()
            }
            attrs["redeliveryDelay"] = str(later)
            return f"<redeliveryPolicy{_attributes(attrs)}/>"
        for key in changed:
            self.depart(
                f"destination_policy[{index}].{key}",
                getattr(entry, key),
                "ActiveMQ redelivers on the broker only through the redeliveryPlugin, which takes no delay under "
                f"{PLUGIN_MIN_DELAY} ms; without it a STOMP NACK dead-letters the message at once",
            )
        return None

    # ---------------------------------------------------------------- listener
    def connector(self, transport: TransportConfig, stomp_port: int) -> str:
        options: dict[str, str] = {}
        for key, option in LISTENER_OPTIONS.items():
            if key not in ("allow_link_stealing", "hb_grace_period_multiplier") and _changed(
                transport, _TRANSPORT_DEFAULTS, key
            ):
                options[option] = xml_value(key, getattr(transport, key))
        if transport.hb_grace_period_multiplier != 1.0:  # ActiveMQ's default is 1.0, ours 1.5
            options[LISTENER_OPTIONS["hb_grace_period_multiplier"]] = str(transport.hb_grace_period_multiplier)
        query = "&amp;".join(f"{k}={v}" for k, v in options.items())
        uri = f"stomp://127.0.0.1:{stomp_port}" + (f"?{query}" if query else "")
        stealing = ' allowLinkStealing="true"' if transport.allow_link_stealing else ""
        return f'<transportConnector name="stomp" uri="{uri}"{stealing}/>'

    def elsewhere(self, config: BrokerConfig) -> None:
        if config.users or config.authorization:
            self.depart("users", len(config.users), "ActiveMQ's simpleAuthenticationPlugin: not written here")


def _attributes(values: dict[str, str]) -> str:
    return "".join(f" {k}={quoteattr(v)}" for k, v in values.items())


def _jolokia(port: int) -> list[str]:
    """ActiveMQ's web console's Jolokia alone: Jolokia's servlet at /api/jolokia in a Jetty
    on 127.0.0.1:``port``, in the broker's Spring context (the web console itself, which
    Debian's package lacks, is not needed); its classes must be on the broker's classpath
    (``clients.activemq.JOLOKIA_CLASSPATH``)."""
    return [
        '<bean id="jolokia" class="org.eclipse.jetty.server.Server" init-method="start" destroy-method="stop">',
        "  <constructor-arg>",
        '    <bean class="java.net.InetSocketAddress">',
        f'      <constructor-arg value="127.0.0.1"/><constructor-arg value="{port}"/>',
        "    </bean>",
        "  </constructor-arg>",
        '  <property name="handler">',
        '    <bean class="org.eclipse.jetty.servlet.ServletContextHandler">',
        '      <property name="contextPath" value="/api"/>',
        '      <property name="servletHandler">',
        '        <bean class="org.eclipse.jetty.servlet.ServletHandler">',
        '          <property name="servlets"><list><bean class="org.eclipse.jetty.servlet.ServletHolder">',
        '            <property name="name" value="jolokia"/>',
        '            <property name="className" value="org.jolokia.http.AgentServlet"/>',
        "          </bean></list></property>",
        '          <property name="servletMappings"><list><bean class="org.eclipse.jetty.servlet.ServletMapping">',
        '            <property name="servletName" value="jolokia"/>',
        '            <property name="pathSpecs"><list><value>/jolokia/*</value></list></property>',
        "          </bean></list></property>",
        "        </bean>",
        "      </property>",
        "    </bean>",
        "  </property>",
        "</bean>",
    ]


def write_xml(
    config: BrokerConfig, *, stomp_port: int, openwire_port: int, jolokia_port: int | None = None
) -> ActiveMQXml:
    """``config`` as an activemq.xml whose STOMP connector is on 127.0.0.1:``stomp_port``
    (OpenWire, which ActiveMQ always wants, on ``openwire_port``); data under ``${activemq.data}``.
    With ``jolokia_port``, the broker's MBeans (JMX without a remote port) and Jolokia at
    ``http://127.0.0.1:<jolokia_port>/api/jolokia`` as ActiveMQ's web console serves it."""
    writer = _Writer()
    broker = config.broker
    body: list[str] = []  # the broker's elements in alphabetical order, as ActiveMQ's schema once required
    if config.destination_policy:
        entries = [line for i, e in enumerate(config.destination_policy) for line in writer.policy(e, i)]
        body += [
            "<destinationPolicy>",
            "  <policyMap>",
            "    <policyEntries>",
            *("      " + line for line in entries),
            "    </policyEntries>",
            "  </policyMap>",
            "</destinationPolicy>",
        ]
    if jolokia_port is not None:
        body += ["<managementContext>", '  <managementContext createConnector="false"/>', "</managementContext>"]
    store = writer.store(config.store)
    redelivery = [
        line for i, e in enumerate(config.destination_policy) if (line := writer.redelivery(e, i)) is not None
    ]
    plugin = (
        [
            '  <redeliveryPlugin fallbackToDeadLetter="true" sendToDlqIfMaxRetriesExceeded="true">',
            "    <redeliveryPolicyMap>",
            "      <redeliveryPolicyMap>",
            "        <redeliveryPolicyEntries>",
            *("          " + line for line in redelivery),
            "        </redeliveryPolicyEntries>",
            "      </redeliveryPolicyMap>",
            "    </redeliveryPolicyMap>",
            "  </redeliveryPlugin>",
        ]
        if redelivery
        else []
    )
    body += [
        *store[:3],
        # the statistics plugin: broker and destination figures over STOMP (``doctor --live`` reads them)
        "<plugins>",
        *plugin,
        "  <statisticsBrokerPlugin/>",
        "</plugins>",
        *writer.usage(config),
        *store[3:],
        "<transportConnectors>",
        f'  <transportConnector name="openwire" uri="tcp://127.0.0.1:{openwire_port}"/>',
        "  " + writer.connector(config.transport, stomp_port),
        "</transportConnectors>",
    ]
    writer.elsewhere(config)
    persistent = xml_value("persistent", broker.persistent)
    offline = (
        f' offlineDurableSubscriberTimeout="{broker.offline_durable_subscriber_timeout}"'
        f' offlineDurableSubscriberTaskSchedule="{broker.offline_durable_subscriber_task_schedule}"'
        if broker.offline_durable_subscriber_timeout >= 0
        else ""
    )
    # the redeliveryPlugin redelivers through the scheduler, which it refuses to start without
    scheduler = ' schedulerSupport="true"' if redelivery else ""
    text = "\n".join(
        [
            "<!-- Generated by minibroker from its configuration (clients/doctor/write_xml.py). -->",
            '<beans xmlns="http://www.springframework.org/schema/beans"',
            '       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"',
            '       xsi:schemaLocation="http://www.springframework.org/schema/beans '
            "http://www.springframework.org/schema/beans/spring-beans.xsd",
            '       http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">',
            '  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>',
            # before the broker: it serves once the broker's ports are open
            *("  " + line for line in (_jolokia(jolokia_port) if jolokia_port is not None else [])),
            f'  <broker xmlns="http://activemq.apache.org/schema/core" brokerName={quoteattr(broker.name)}',
            f'          persistent="{persistent}" useJmx="{xml_value("useJmx", jolokia_port is not None)}"'
            ' dataDirectory="${activemq.data}"' + offline + scheduler + ">",
            *("    " + line for line in body),
            "  </broker>",
            "</beans>",
            "",
        ]
    )
    return ActiveMQXml(text, tuple(writer.departures))
