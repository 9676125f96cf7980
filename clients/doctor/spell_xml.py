"""ActiveMQ's ``activemq.xml``: how ``doctor`` names options, shows values and writes fixes.

A value the file sets is shown as the file wrote it (``<tempUsage
limit="30 mb"/>``); one it does not set is shown with ActiveMQ's default. A fix
is the XML to paste: a ``<systemUsage>`` block, a ``<policyEntry>`` with its
attributes and strategy elements, or the STOMP ``<transportConnector>`` with
its URI options (``transport.soWriteTimeout``, ``transport.defaultHeartBeat``).
"""

from __future__ import annotations

from typing import Any

from .model import Change, Listener, PolicyRef, Setup, format_size

__all__ = [
    "XmlSyntax",
    "SECTION_XML",
    "POLICY_ATTRIBUTES",
    "KAHADB_INTERVALS",
    "LISTENER_OPTIONS",
    "REDELIVERY_ATTRIBUTES",
    "DEAD_LETTER_ELEMENTS",
    "with_uri_options",
]

#: Our section option -> (element, attribute) in activemq.xml.
SECTION_XML = {
    "system_usage.memory_limit": ("memoryUsage", "limit"),
    "system_usage.store_limit": ("storeUsage", "limit"),
    "system_usage.temp_limit": ("tempUsage", "limit"),
    "store.journal_max_file_length": ("kahaDB", "journalMaxFileLength"),
    "store.temp_journal_max_file_length": ("pListStoreImpl", "journalMaxFileLength"),
    "broker.persistent": ("broker", "persistent"),
}

#: Our store option -> the ``<kahaDB>`` attribute (ms): when KahaDB deletes the files nothing needs.
KAHADB_INTERVALS = {"cleanup_interval": "cleanupInterval", "checkpoint_interval": "checkpointInterval"}

#: Our policy option -> the ``<policyEntry>`` attribute.
POLICY_ATTRIBUTES = {
    "memory_limit": "memoryLimit",
    "cursor_memory_high_water_mark": "cursorMemoryHighWaterMark",
    "producer_flow_control": "producerFlowControl",
    "send_fail_if_no_space": "sendFailIfNoSpace",
    "send_fail_if_no_space_after_timeout": "sendFailIfNoSpaceAfterTimeout",
    "queue_prefetch": "queuePrefetch",
    "topic_prefetch": "topicPrefetch",
    "durable_topic_prefetch": "durableTopicPrefetch",
    "queue_browser_prefetch": "queueBrowserPrefetch",
    "max_page_size": "maxPageSize",
    "prioritized_messages": "prioritizedMessages",
    "expire_messages_period": "expireMessagesPeriod",
}

#: The redelivery options: a <redeliveryPolicy> of the broker's redeliveryPlugin, by ActiveMQ's names.
REDELIVERY_ATTRIBUTES = {
    "maximum_redeliveries": "maximumRedeliveries",
    "initial_redelivery_delay": "initialRedeliveryDelay",
    "redelivery_delay": "redeliveryDelay",
    "use_exponential_back_off": "useExponentialBackOff",
    "back_off_multiplier": "backOffMultiplier",
    "maximum_redelivery_delay": "maximumRedeliveryDelay",
}
#: ActiveMQ's strategy element for our ``dead_letter_strategy``.
DEAD_LETTER_ELEMENTS = {
    "shared": "sharedDeadLetterStrategy",
    "individual": "individualDeadLetterStrategy",
    "discard": "discarding",
}
#: Our policy option -> the strategy element that carries it.
_POLICY_ELEMENTS = {
    "pending_cursor": "pendingSubscriberPolicy",
    "pending_message_limit": "pendingMessageLimitStrategy",
    "message_eviction_strategy": "messageEvictionStrategy",
    "abort_slow_consumer": "slowConsumerStrategy",
}

#: Attributes of ``<abortSlowConsumerStrategy>``.
_ABORT_ATTRIBUTES = {
    "max_slow_count": "maxSlowCount",
    "max_slow_duration": "maxSlowDuration",
    "abort_slow_consumer_check_period": "checkPeriod",
    "abort_connection": "abortConnection",
}

#: Our transport option -> the STOMP connector's URI option (or attribute).
LISTENER_OPTIONS = {
    "so_write_timeout": "transport.soWriteTimeout",
    "default_heart_beat": "transport.defaultHeartBeat",
    "connect_timeout": "transport.connectAttemptTimeout",
    "max_frame_size": "wireFormat.maxFrameSize",
    "max_data_length": "wireFormat.maxDataLength",
    "allow_link_stealing": "allowLinkStealing",
    "hb_grace_period_multiplier": "transport.hbGracePeriodMultiplier",
}

_SIZE_KEYS = {
    "memory_limit",
    "store_limit",
    "temp_limit",
    "journal_max_file_length",
    "temp_journal_max_file_length",
    "max_frame_size",
    "max_data_length",
}


def quoteattr(text: str) -> str:
    """``text`` as a double-quoted attribute; ``>`` stays readable (``topic=">"``), as ActiveMQ's own files write it."""
    return '"' + text.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;") + '"'


def xml_value(key: str, value: Any) -> str:
    """A value as an attribute of activemq.xml would hold it."""
    option = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if option in _SIZE_KEYS and isinstance(value, int) and value:
        return format_size(value)
    return str(value)


def _describe_policy_default(key: str, value: Any, kind: str = "topic") -> str:
    if key == "pending_cursor" and kind == "queue":
        return (
            "<vmQueueCursor/>"
            if value == "vm"
            else "<storeCursor/>, whose non-persistent messages swap to the temp store"
        )
    if key == "pending_cursor":
        return "<vmCursor/>" if value == "vm" else "<fileCursor/>, which swaps to the temp store"
    if key == "pending_message_limit":
        return "none, so a full subscription blocks" if value < 0 else str(value)
    if key == "abort_slow_consumer":
        return "<abortSlowConsumerStrategy/>" if value else "none"
    if key == "memory_limit" and not value:
        return "none, so the destination shares <memoryUsage>"
    return xml_value(key, value)


def _policy_label(key: str, kind: str = "topic") -> str:
    if key == "pending_cursor" and kind == "queue":
        return "<pendingQueuePolicy>"
    if key in POLICY_ATTRIBUTES:
        return POLICY_ATTRIBUTES[key]
    if key in _ABORT_ATTRIBUTES:
        return f"abortSlowConsumerStrategy {_ABORT_ATTRIBUTES[key]}"
    return f"<{_POLICY_ELEMENTS.get(key, key)}>"


def _entry_tag(ref: PolicyRef) -> str:
    return f"<policyEntry {ref.kind}={quoteattr(ref.pattern)}>"


def with_uri_options(uri: str, options: dict[str, str]) -> str:
    """``uri`` with its query options set (replaced or appended) to ``options``."""
    base, _, query = uri.partition("?")
    pairs = [p.split("=", 1) for p in query.split("&") if p] if query else []
    kept = [(k, v[0] if v else "") for k, *v in pairs if k not in options]
    merged = kept + list(options.items())
    return base + "?" + "&".join(f"{k}={v}" if v != "" else k for k, v in merged)


class XmlSyntax:
    """Spelling for ActiveMQ's activemq.xml."""

    name = "activemq-xml"

    def setting(self, setup: Setup, key: str) -> str:
        if key in setup.written:
            return setup.written[key]
        section, option = key.split(".", 1)
        element, attribute = SECTION_XML[key]
        value = getattr(getattr(setup.config, section), option)
        return f"<{element} {attribute}> not set: {xml_value(key, value)} (ActiveMQ's default)"

    def policy_setting(self, setup: Setup, ref: PolicyRef, key: str) -> str:
        value = getattr(ref.entry, key)
        if ref.is_default:
            written = setup.written.get(f"default_policy.{key}")
            if written is not None:
                return f"<policyMap><defaultEntry><policyEntry> {written}"
            return (
                f'no <policyEntry> for {ref.kind} "{ref.pattern}": {_policy_label(key, ref.kind)} = '
                f"{_describe_policy_default(key, value, ref.kind)} (ActiveMQ's default)"
            )
        written = setup.written.get(f"destination_policy[{ref.index}].{key}")
        if written is not None:
            return f"{_entry_tag(ref)} {written}"
        return (
            f"{_entry_tag(ref)} {_policy_label(key, ref.kind)} not set: "
            f"{_describe_policy_default(key, value, ref.kind)} (ActiveMQ's default)"
        )

    def listener_setting(self, setup: Setup, listener: Listener, key: str) -> str:
        option = LISTENER_OPTIONS[key]
        head = f"<transportConnector name={quoteattr(listener.name)}>"
        written = setup.written.get(f"listener[{listener.name}].{key}")
        if written is not None:
            return f"{head} {written}"
        value = getattr(listener.transport, key)
        return f"{head} {option} not set: {xml_value(key, value)} (ActiveMQ's default)"

    # ---------------------------------------------------------------- fixes
    def render(self, setup: Setup, changes: tuple[Change, ...]) -> str:
        blocks: list[str] = []
        usage = [c for c in changes if c.key.startswith("system_usage.")]
        if usage:
            inner = []
            for c in usage:
                element, attribute = SECTION_XML[c.key]
                inner += [
                    f"<{element}>",
                    f"  <{element} {attribute}={quoteattr(xml_value(c.key, c.value))}/>",
                    f"</{element}>",
                ]
            blocks.append(
                "\n".join(
                    [
                        "<systemUsage>",
                        "  <systemUsage>",
                        *("    " + x for x in inner),
                        "  </systemUsage>",
                        "</systemUsage>",
                    ]
                )
            )
        for c in changes:
            if c.key == "store.journal_max_file_length":
                blocks.append(
                    f"<persistenceAdapter>\n  <kahaDB journalMaxFileLength={quoteattr(xml_value(c.key, c.value))}/>\n</persistenceAdapter>"
                )
            elif c.key == "store.temp_journal_max_file_length":
                blocks.append(
                    '<tempDataStore>\n  <pListStoreImpl directory="${activemq.data}/tmp_storage" '
                    f"journalMaxFileLength={quoteattr(xml_value(c.key, c.value))}/>\n</tempDataStore>"
                )
        blocks += self._render_listeners(setup, [c for c in changes if c.listener is not None])
        blocks += self._render_policies(setup, [c for c in changes if c.kind is not None])
        return "\n\n".join(blocks)

    def _render_listeners(self, setup: Setup, changes: list[Change]) -> list[str]:
        out = []
        for listener in setup.listeners:
            mine = [c for c in changes if c.listener == listener.name]
            if not mine:
                continue
            keyed = [(c.key.split(".", 1)[-1], c.value) for c in mine]
            options = {LISTENER_OPTIONS[k]: xml_value(k, v) for k, v in keyed if k != "allow_link_stealing"}
            uri = with_uri_options(listener.uri, options) if options else listener.uri
            extra = "".join(
                f" allowLinkStealing={quoteattr(xml_value(k, v))}" for k, v in keyed if k == "allow_link_stealing"
            )
            out.append(f"<transportConnector name={quoteattr(listener.name)} uri={quoteattr(uri)}{extra}/>")
        return out

    def _render_policies(self, setup: Setup, changes: list[Change]) -> list[str]:
        groups: dict[tuple[str, str], list[Change]] = {}
        for c in changes:
            groups.setdefault((c.kind or "queue", c.pattern or ">"), []).append(c)
        out = []
        for (kind, pattern), group in groups.items():
            attrs = "".join(
                f" {POLICY_ATTRIBUTES[c.key]}={quoteattr(xml_value(c.key, c.value))}"
                for c in group
                if c.key in POLICY_ATTRIBUTES
            )
            children = [line for c in group for line in _policy_children(c, group)]
            has_entry = any(e.kind == kind and e.pattern == pattern for e in setup.config.destination_policy)
            where = (
                f'merge into your <policyEntry {kind}="{pattern}">'
                if has_entry
                else "inside <destinationPolicy><policyMap><policyEntries>"
            )
            head = f"<policyEntry {kind}={quoteattr(pattern)}{attrs}"
            body = [head + "/>"] if not children else [head + ">", *("  " + x for x in children), "</policyEntry>"]
            out.append("\n".join([f"<!-- {where} -->", *body]))
        return out


def _policy_children(change: Change, group: list[Change]) -> list[str]:
    """The strategy elements for one policy change (abort attributes ride on abort_slow_consumer)."""
    key, value = change.key, change.value
    if key == "pending_cursor":
        return [
            "<pendingSubscriberPolicy>",
            f"  <{'vmCursor' if value == 'vm' else 'fileCursor'}/>",
            "</pendingSubscriberPolicy>",
        ]
    if key == "pending_message_limit":
        return [
            "<pendingMessageLimitStrategy>",
            f'  <constantPendingMessageLimitStrategy limit="{value}"/>',
            "</pendingMessageLimitStrategy>",
        ]
    if key == "abort_slow_consumer" and value:
        attrs = "".join(
            f" {_ABORT_ATTRIBUTES[c.key]}={quoteattr(xml_value(c.key, c.value))}"
            for c in group
            if c.key in _ABORT_ATTRIBUTES
        )
        return ["<slowConsumerStrategy>", f"  <abortSlowConsumerStrategy{attrs}/>", "</slowConsumerStrategy>"]
    return []
