"""Broker configuration: TOML in, validated frozen dataclasses out.

The names follow ActiveMQ's (``memoryUsage limit`` becomes
``system_usage.memory_limit``, ``policyEntry`` becomes a
``[[destination_policy]]`` table, ``cursorMemoryHighWaterMark`` becomes
``cursor_memory_high_water_mark``). Every option is declared once, as a
dataclass field whose metadata carries its parser and its one-line doc; the
loader walks the TOML against those declarations, so an unknown key or a bad
value is refused at start with a message naming both, never a traceback:

    bad value for 'transport.port': 'abc' (expected an integer from 1 to 65535)
    unknown key 'transport.prot' in 'broker.toml': did you mean 'port'? (known keys: connect_timeout, ...)

The embedded default configuration (``default.toml`` beside this module) is
what ``minibroker serve`` runs with when given no ``--config``; a test checks
that it agrees with the defaults declared here.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from minibroker import wildcards
from minibroker.digits import parse_decimal
from minibroker.errors import ConfigError
from minibroker.eventloop import LOOPS
from storage.model import MIN_FILE_SIZE

__all__ = [
    "BrokerConfig",
    "BrokerSection",
    "TransportConfig",
    "ConsoleConfig",
    "SystemUsageConfig",
    "StoreConfig",
    "PolicyEntry",
    "User",
    "AuthorizationEntry",
    "TempDestinationAuthorization",
    "load_config",
    "parse_config",
    "default_config_text",
    "parse_size",
    "is_size",
    "ANY_PORT",
]

Parser = Callable[[Any], Any]

# --------------------------------------------------------------------------- value parsers
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> int:
    """Bytes from an integer or a text like ``"64 mb"`` (ActiveMQ's units are powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError('expected a size such as 65536 or "64 mb"')
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a size of 0 or more")
        return value
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m and m.group(2).lower() in _SIZE_UNITS:
            return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    raise ValueError('expected a size such as 65536 or "64 mb"')


def integer(low: int, high: int | None = None) -> Parser:
    """An integer within ``[low, high]`` (no upper bound when ``high`` is None)."""
    expected = (
        f"expected an integer from {low} to {high}" if high is not None else f"expected an integer of {low} or more"
    )

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            raise ValueError(expected)
        return value

    return parse


def size(value: Any) -> int:
    return parse_size(value)


def is_size(parse: Parser | None) -> bool:
    """Whether ``parse`` reads a size (``size`` or one made by ``size_at_least``); None: no."""
    return parse is size or getattr(parse, "reads_size", False)


def size_at_least(low: int, why: str) -> Parser:
    """A size of at least ``low`` bytes; ``why`` says what needs that much."""

    def parse(value: Any) -> int:
        parsed = parse_size(value)
        if parsed < low:
            raise ValueError(f"expected a size of at least {low} bytes: {why}")
        return parsed

    parse.reads_size = True  # type: ignore[attr-defined]
    return parse


_journal_file_size = size_at_least(MIN_FILE_SIZE, "a journal file holds its header and at least one record")

#: The most PBKDF2 iterations a password hash may ask for: each login runs them all,
#: and OWASP's advice for PBKDF2-SHA256 (2023) is 600,000.
MAX_HASH_ITERATIONS = 2_000_000


def password_hash(value: Any) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<hash>`` as ``minibroker passwd`` prints it."""
    if not isinstance(value, str):
        raise ValueError("expected a string")
    parts = value.split("$")
    if len(parts) != 4 or parts[0] != "pbkdf2_sha256" or not parts[2] or not parts[3]:
        raise ValueError("expected pbkdf2_sha256$<iterations>$<salt>$<hash>, as `minibroker passwd` prints it")
    iterations = parse_decimal(parts[1])
    if not 1 <= iterations <= MAX_HASH_ITERATIONS:
        raise ValueError(
            f"expected from 1 to {MAX_HASH_ITERATIONS:,} iterations (every login runs them all), not {iterations:,}"
        )
    for part in parts[2:]:
        try:
            base64.b64decode(part + "=" * (-len(part) % 4), validate=True)
        except ValueError:
            raise ValueError(f"the salt and the hash must be base64, not {part[:20]!r}") from None
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def choice(*options: str) -> Parser:
    def parse(value: Any) -> str:
        if value not in options:
            raise ValueError("expected one of " + ", ".join(repr(o) for o in options))
        return str(value)

    return parse


def heart_beat(value: Any) -> tuple[int, int]:
    """``"cx,cy"`` in milliseconds, as in the STOMP ``heart-beat`` header."""
    if isinstance(value, str):
        parts = value.split(",")
        try:
            if len(parts) == 2:
                cx, cy = (parse_decimal(p.strip()) for p in parts)
                if max(cx, cy) <= 2**31 - 1:
                    return (cx, cy)
        except ValueError:
            pass
    raise ValueError('expected two millisecond counts such as "0,0" or "10000,10000"')


def number(low: float, high: float) -> Parser:
    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"expected a number from {low} to {high}")
        return float(value)

    return parse


def destination_pattern(value: Any) -> str:
    if not isinstance(value, str) or not value or value.startswith("/"):
        raise ValueError('expected a destination name or ActiveMQ wildcard without prefix, such as "orders.>"')
    return value


#: A listener port that takes any free port (tests), where 0 means "off".
ANY_PORT = -1


def listener_port(value: Any) -> int:
    """A port for an optional listener: 1-65535, 0 = off, or "any" (a free port, for tests)."""
    if value == "any" or value == ANY_PORT:
        return ANY_PORT
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError('expected an integer from 0 (off) to 65535, or "any" (any free port)')
    return value


def string_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError('expected a list of names such as ["admins", "users"]')
    return tuple(value)


def option(default: Any, parse: Parser, doc: str) -> Any:
    """Declare a configuration option: its default, its parser, one line of doc."""
    return field(default=default, metadata={"parse": parse, "doc": doc})


# --------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class BrokerSection:
    """``[broker]``: identity and where data lives."""

    name: str = option("localhost", text, "broker name (ActiveMQ brokerName), in logs and message ids")
    data_dir: str = option("data", text, "directory for journals and temp files")
    persistent: bool = option(
        True, boolean, "journal persistent messages (ActiveMQ persistent); false keeps everything in memory"
    )
    offline_durable_subscriber_timeout: int = option(
        -1,
        integer(-1),
        "ms a durable topic subscription may stay offline before the broker removes it and the messages it "
        "holds; -1 = never (ActiveMQ offlineDurableSubscriberTimeout)",
    )
    offline_durable_subscriber_task_schedule: int = option(
        300000,
        integer(1),
        "ms between the checks for offline durable subscriptions past the timeout "
        "(ActiveMQ offlineDurableSubscriberTaskSchedule)",
    )
    trace: str = option("", text, "write the trace (JSON lines, docs/trace-schema.md) to this file; empty = off")
    trace_writer_nice: int = option(
        19,
        integer(0, 19),
        "CPU niceness of the trace's writer process: 19 takes only idle CPU (the trace lags under load), 0 keeps up",
    )
    trace_lag_limit: int = option(
        256 * 1024 * 1024,
        size,
        "how much trace may wait (spooled beside the file) while the broker is busy; 0 = write at once",
    )
    trace_format: str = option(
        "auto",
        choice("auto", "jsonl", "parquet", "both"),
        "the trace as JSON lines (the file), Parquet segments in the directory <trace>.parquet/ "
        "(needs pyarrow), or both; auto: both where pyarrow is installed (what analyze reads "
        "fastest), else JSON lines",
    )


@dataclass(frozen=True)
class TransportConfig:
    """``[transport]``: the STOMP listener and its per-connection limits."""

    host: str = option("127.0.0.1", text, "address to listen on")
    port: int = option(61613, integer(0, 65535), "STOMP port (0: any free port)")
    connect_timeout: int = option(
        30000, integer(0), "ms a connection may take to send CONNECT (ActiveMQ connectAttemptTimeout); 0 = no limit"
    )
    default_heart_beat: tuple[int, int] = option(
        (0, 0), heart_beat, "heart-beat assumed when CONNECT has none (ActiveMQ transport.defaultHeartBeat)"
    )
    hb_grace_period_multiplier: float = option(
        1.5, number(1.0, 10.0), "a peer is dead after this many of its heart-beat intervals of silence"
    )
    max_command_length: int = option(1024, integer(16), "longest command line, bytes")
    max_header_line_length: int = option(10240, integer(64), "longest header line, bytes")
    max_headers: int = option(1000, integer(1), "most headers in one frame")
    max_data_length: int = option(100 * 1024 * 1024, size, "largest body (ActiveMQ maxDataLength)")
    max_frame_size: int = option(
        110 * 1024 * 1024, size_at_least(1024, "a CONNECT frame must fit"), "largest frame, headers and body"
    )
    write_buffer_limit: int = option(
        256 * 1024, size, "bytes queued for a connection's socket before the broker stops dispatching to it"
    )
    so_write_timeout: int = option(
        0, integer(0), "ms a blocked write may last before the connection is closed (ActiveMQ soWriteTimeout); 0 = off"
    )
    event_loop: str = option(
        "auto",
        choice(*LOOPS),
        "the event loop: uvloop (the fast extra) when installed, else asyncio's own (auto); "
        "or asyncio, or uvloop (an error when not installed)",
    )
    allow_link_stealing: bool = option(
        False, boolean, "a CONNECT with a client-id already connected takes over instead of being refused"
    )
    websocket_port: int = option(
        61614, listener_port, "STOMP over WebSocket port (ActiveMQ's ws transport), on the same host; 0 = off"
    )
    allowed_origins: tuple[str, ...] = option(
        (),
        string_list,
        'WebSocket: the Origin headers a browser page may connect from ("http://host:port"); empty = any',
    )
    max_connections: int = option(
        1000,
        integer(0),
        "connections at once (ActiveMQ maximumConnections); the one over gets an ERROR and is closed; 0 = no limit",
    )
    max_unauthenticated_per_address: int = option(
        100,
        integer(0),
        "connections from one address that have not logged in yet (no CONNECT accepted), applied once more than "
        "half of max_connections are taken; the one over gets an ERROR and is closed, so one address holding "
        "sockets open cannot take every max_connections slot while a burst of honest clients still gets in; "
        "0 = no limit",
    )
    max_connect_frame_size: int = option(
        16 * 1024,
        size,
        "largest frame before the CONNECT is accepted (the CONNECT itself, or anything sent before it): "
        "a peer that has not logged in cannot make the broker hold more",
    )
    partial_frame_memory_limit: int = option(
        128 * 1024 * 1024,
        size,
        "bytes of frames not yet complete that all connections together may hold; the connection whose bytes "
        "pass it gets an ERROR and is closed (at least max_frame_size)",
    )
    partial_frame_timeout: int = option(
        60000, integer(0), "ms a frame may take to arrive once its first byte has, while the broker reads; 0 = no limit"
    )
    login_failures_before_delay: int = option(
        3, integer(1), "failed logins from one address before its refusals are delayed"
    )
    login_failure_delay: int = option(
        1000,
        integer(0),
        "ms the refusal of a failed login is withheld once its address has failed that often; doubles with each "
        "further failure, up to 30 s; a successful login from the address ends it; 0 = off",
    )


@dataclass(frozen=True)
class ConsoleConfig:
    """``[console]``: the web console and ``/metrics`` (ActiveMQ's web console port)."""

    host: str = option("127.0.0.1", text, "address the console listens on (only this machine unless changed)")
    port: int = option(8161, listener_port, "web console and Prometheus /metrics port; 0 = off")


@dataclass(frozen=True)
class SystemUsageConfig:
    """``[system_usage]``: ActiveMQ's ``<systemUsage>`` limits."""

    memory_limit: int = option(64 * 1024 * 1024, size, "broker memory for messages (ActiveMQ memoryUsage)")
    store_limit: int = option(10 * 1024**3, size, "bytes the persistent store may use (ActiveMQ storeUsage)")
    temp_limit: int = option(5 * 1024**3, size, "bytes the temp store may use (ActiveMQ tempUsage)")


@dataclass(frozen=True)
class StoreConfig:
    """``[store]``: the persistence journal."""

    layout: str = option("growing", choice("growing", "ring"), "growing (KahaDB) or ring (Qpid legacystore)")
    journal_max_file_length: int = option(
        32 * 1024 * 1024, _journal_file_size, "growing layout: size of one journal file"
    )
    compact_acks_after_no_gc: int = option(
        0,
        integer(0),
        "growing layout: after this many collections in a row that deleted nothing, write again the acks "
        "that keep a chain of files alive (ActiveMQ compactAcksAfterNoGC); 0 = never",
    )
    compact_acks_ignores_store_growth: bool = option(
        False,
        boolean,
        "growing layout: compact acks even when the journal grew since the last check "
        "(ActiveMQ compactAcksIgnoresStoreGrowth)",
    )
    cleanup_interval: int = option(
        30000,
        integer(1),
        "ActiveMQ only (written to activemq.xml): ms between KahaDB's deletions of the journal files nothing "
        "needs (ActiveMQ cleanupInterval); minibroker's growing journal deletes such a file at once",
    )
    checkpoint_interval: int = option(
        5000,
        integer(1),
        "ActiveMQ only (written to activemq.xml): ms between KahaDB's checkpoints, which run its cleanup "
        "(ActiveMQ checkpointInterval)",
    )
    file_count: int = option(8, integer(4, 64), "ring layout: number of journal files per queue")
    file_size: int = option(1536 * 1024, _journal_file_size, "ring layout: size of one journal file")
    fsync: str = option("always", choice("always", "batch", "never"), "when journal writes reach the disk")
    temp_journal_max_file_length: int = option(
        32 * 1024 * 1024,
        _journal_file_size,
        "temp store (file cursors): size of one file (ActiveMQ PListStore journalMaxFileLength)",
    )
    store_latency: int = option(
        0,
        integer(0),
        "a slow store on purpose (labs): ms a persistent ACK costs per message in flight, while the connection is not read; 0 = off",
    )
    index_cache_rows: int = option(
        65536,
        integer(1),
        "rows of each journal's index of live messages (and of the temp store's) kept in memory; the rest goes to a scratch file (KahaDB indexCacheSize)",
    )


@dataclass(frozen=True)
class PolicyEntry:
    """``[[destination_policy]]``: settings for destinations matching ``queue`` or ``topic``."""

    queue: str | None = option(None, destination_pattern, "queues this entry applies to (ActiveMQ wildcard)")
    topic: str | None = option(None, destination_pattern, "topics this entry applies to (ActiveMQ wildcard)")
    queue_prefetch: int = option(1000, integer(1, 32767), "default STOMP prefetch for queue subscriptions")
    topic_prefetch: int = option(32767, integer(1, 32767), "default STOMP prefetch for topic subscriptions")
    durable_topic_prefetch: int = option(100, integer(1, 32767), "default prefetch for durable topic subscriptions")
    queue_browser_prefetch: int = option(500, integer(1, 32767), "default prefetch for queue browsers")
    max_page_size: int = option(200, integer(1), "messages paged in (and stepped over by selectors) at a time")
    prioritized_messages: bool = option(False, boolean, "a queue dispatches higher message priorities first")
    maximum_redeliveries: int = option(
        6, integer(-1), "deliveries after the first before a message is dead-lettered; -1 = never"
    )
    initial_redelivery_delay: int = option(
        0, integer(0), "ms a NACKed or rolled-back queue message waits before its first redelivery; 0 = at once"
    )
    redelivery_delay: int = option(0, integer(0), "ms before each later redelivery (without back-off)")
    use_exponential_back_off: bool = option(
        False, boolean, "each redelivery waits back_off_multiplier times as long as the one before"
    )
    back_off_multiplier: float = option(5.0, number(1.0, 1000.0), "the back-off's factor (ActiveMQ's default 5)")
    maximum_redelivery_delay: int = option(
        -1, integer(-1), "ms no redelivery waits longer than (with back-off); -1 = no cap"
    )
    dead_letter_on_nack: bool = option(False, boolean, "a NACK dead-letters at once, as ActiveMQ's STOMP NACK does")
    dead_letter_strategy: str = option(
        "shared",
        choice("shared", "individual", "discard"),
        "shared: one DLQ; individual: ActiveMQ.DLQ.Queue.<name>; discard: drop",
    )
    dead_letter_queue: str = option("ActiveMQ.DLQ", destination_pattern, "the shared dead letter queue's name")
    process_non_persistent: bool = option(
        False, boolean, "dead-letter non-persistent messages too (otherwise they are dropped)"
    )
    process_expired: bool = option(True, boolean, "expired messages go to the dead letter queue")
    expire_messages_period: int = option(
        30000, integer(0), "ms between sweeps for expired messages; 0 = only at dispatch"
    )
    memory_limit: int = option(0, size, "this destination's own memory limit; 0 = the broker's (ActiveMQ memoryLimit)")
    cursor_memory_high_water_mark: int = option(
        70, integer(1, 100), "percent of its memory at which a cursor stops caching"
    )
    space_check: str = option(
        "current", choice("current", "legacy"), "cursor space rule: current (ActiveMQ 5.15+) or legacy (up to 5.14)"
    )
    producer_flow_control: bool = option(True, boolean, "block producers while the destination's memory is full")
    send_fail_if_no_space: bool = option(False, boolean, "answer a producer with an ERROR instead of blocking it")
    send_fail_if_no_space_after_timeout: int = option(
        0, integer(0), "ms a producer may be blocked before it gets an ERROR; 0 = forever"
    )
    blocked_producer_warning_interval: int = option(30000, integer(0), "ms between log lines about a blocked producer")
    pending_cursor: str = option(
        "file",
        choice("vm", "file"),
        "topic subscriptions' and non-persistent queue messages' cursor: file (spill to the temp store past the "
        "high-water mark, ActiveMQ's default) or vm (memory only: a backlog no one consumes fills the broker's memory)",
    )
    pending_message_limit: int = option(
        -1, integer(-1), "topic subscriptions: messages pending beyond prefetch before eviction; -1 = no limit (block)"
    )
    message_eviction_strategy: str = option(
        "oldest", choice("oldest", "newest"), "which pending message a full subscription discards"
    )
    abort_slow_consumer: bool = option(False, boolean, "abort subscriptions that stay slow (AbortSlowConsumerStrategy)")
    max_slow_count: int = option(-1, integer(-1), "abort after this many checks found it slow; -1 = off")
    max_slow_duration: int = option(30000, integer(0), "ms a subscription may stay slow before it is aborted")
    abort_slow_consumer_check_period: int = option(30000, integer(1), "ms between slow-consumer checks")
    abort_connection: bool = option(False, boolean, "abort the whole connection, not only the slow subscription")

    @property
    def pattern(self) -> str:
        return self.queue if self.queue is not None else (self.topic or ">")

    @property
    def kind(self) -> str:
        return "queue" if self.queue is not None else "topic"

    def redelivery_delay_ms(self, redeliveries: int) -> int:
        """How long (ms) a message waits before its ``redeliveries``-th redelivery (1, 2 ...),
        as ActiveMQ's ``RedeliveryPolicy.getNextRedeliveryDelay`` counts it: the first waits
        ``initial_redelivery_delay``; each later one ``redelivery_delay``, or with back-off the
        one before times ``back_off_multiplier``, capped at ``maximum_redelivery_delay``."""
        delay = self.initial_redelivery_delay
        for _ in range(redeliveries - 1):
            previous, delay = delay, self.redelivery_delay
            if previous > 0 and self.use_exponential_back_off and self.back_off_multiplier > 1:
                delay = int(previous * self.back_off_multiplier)
                if self.maximum_redelivery_delay != -1 and delay > self.maximum_redelivery_delay:
                    delay = max(self.maximum_redelivery_delay, self.redelivery_delay)
        return delay

    def applies_to(self, kind: str, name: str) -> bool:
        """Does this entry apply to the ``kind`` ("queue"/"topic") destination ``name``?"""
        return kind == self.kind and wildcards.matches(self.pattern, name)


@dataclass(frozen=True)
class User:
    """``[[users]]``: one account (ActiveMQ's simpleAuthenticationPlugin)."""

    name: str = option("", text, "user name (the STOMP login)")
    password_hash: str = option("", password_hash, "salted hash from `minibroker passwd`")
    groups: tuple[str, ...] = option((), string_list, "groups the user belongs to")


@dataclass(frozen=True)
class AuthorizationEntry:
    """``[[authorization]]``: who may read, write and create (admin) matching destinations."""

    queue: str | None = option(None, destination_pattern, "queues this entry covers (ActiveMQ wildcard)")
    topic: str | None = option(None, destination_pattern, "topics this entry covers (ActiveMQ wildcard)")
    read: tuple[str, ...] = option((), string_list, "groups (or users) that may subscribe and browse")
    write: tuple[str, ...] = option((), string_list, "groups (or users) that may send")
    admin: tuple[str, ...] = option(
        (), string_list, "groups (or users) that may create the destination and run admin operations on it"
    )

    @property
    def pattern(self) -> str:
        return self.queue if self.queue is not None else (self.topic or ">")

    @property
    def kind(self) -> str:
        return "queue" if self.queue is not None else "topic"


@dataclass(frozen=True)
class TempDestinationAuthorization:
    """``[temp_destination_authorization]``: who may send to another connection's
    temporary destination (ActiveMQ's ``tempDestinationAuthorizationEntry``)."""

    write: tuple[str, ...] = option(
        (),
        string_list,
        "groups (or users) that may send to a temporary destination they do not own (a reply-to); "
        "only its owner ever consumes from one",
    )


@dataclass(frozen=True)
class BrokerConfig:
    """The whole configuration."""

    broker: BrokerSection = field(default_factory=BrokerSection)
    transport: TransportConfig = field(default_factory=TransportConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    system_usage: SystemUsageConfig = field(default_factory=SystemUsageConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    destination_policy: tuple[PolicyEntry, ...] = ()
    users: tuple[User, ...] = ()
    authorization: tuple[AuthorizationEntry, ...] = ()
    temp_destination_authorization: TempDestinationAuthorization = field(default_factory=TempDestinationAuthorization)

    def policy_for(self, kind: str, name: str) -> PolicyEntry:
        """The most specific policy entry for a destination, or the defaults.

        As ActiveMQ's ``PolicyMap``: among the entries whose wildcard matches,
        the one with the most literal elements wins; ties go to the first.
        """
        best: PolicyEntry | None = None
        for entry in self.destination_policy:
            if entry.applies_to(kind, name) and (
                best is None or wildcards.specificity(entry.pattern) > wildcards.specificity(best.pattern)
            ):
                best = entry
        return best if best is not None else _DEFAULT_POLICY

    def on_free_ports(self) -> BrokerConfig:
        """A copy that listens on free ports only: STOMP on any free port, the optional
        listeners off unless they ask for ``"any"`` port (tests and live labs run beside
        other brokers on one machine)."""
        t, c = self.transport, self.console
        return self.replace(
            transport={"port": 0, "websocket_port": t.websocket_port if t.websocket_port == ANY_PORT else 0},
            console={"port": c.port if c.port == ANY_PORT else 0},
        )

    def replace(self, **sections: Any) -> BrokerConfig:
        """A copy with some options changed: ``replace(transport={"port": 0})``."""
        changes = {}
        for name, values in sections.items():
            current = getattr(self, name)
            changes[name] = dataclasses.replace(current, **values) if isinstance(values, dict) else values
        return dataclasses.replace(self, **changes)


_DEFAULT_POLICY = PolicyEntry()

_SECTIONS: dict[str, type] = {
    "broker": BrokerSection,
    "transport": TransportConfig,
    "console": ConsoleConfig,
    "system_usage": SystemUsageConfig,
    "store": StoreConfig,
    "temp_destination_authorization": TempDestinationAuthorization,
}


# --------------------------------------------------------------------------- loading
def _nearest(key: str, known: Iterable[str]) -> str:
    """`` did you mean 'KNOWN'?`` for the known key nearest a misspelt one, or nothing."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" did you mean '{close[0]}'?" if close else ""


def _build(cls: type, table: Any, where: str, source: str = "configuration") -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"'{where}' must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, raw in table.items():
        f = fields.get(key)
        if f is None:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key '{where}.{key}' in {source}:{_nearest(key, fields)} (known keys: {known})")
        try:
            values[key] = f.metadata["parse"](raw)
        except ValueError as exc:
            raise ConfigError(f"bad value for '{where}.{key}': {raw!r} ({exc})") from None
    return cls(**values)


_TABLE_ARRAYS: dict[str, type] = {}  # filled below, once the classes exist


def _build_array(key: str, value: Any, source: str) -> tuple[Any, ...]:
    cls = _TABLE_ARRAYS[key]
    if not isinstance(value, list):
        raise ConfigError(f"'{key}' in {source} must be an array of tables ([[{key}]])")
    built = []
    for i, table in enumerate(value):
        where = f"{key}[{i}]"
        entry = _build(cls, table, where, source)
        if cls in (PolicyEntry, AuthorizationEntry) and (entry.queue is None) == (entry.topic is None):
            raise ConfigError(f"'{where}' needs exactly one of 'queue' or 'topic'")
        if cls is User and (not entry.name or not entry.password_hash):
            raise ConfigError(f"'{where}' needs both 'name' and 'password_hash'")
        built.append(entry)
    return tuple(built)


def parse_config(data: Mapping[str, Any], source: str = "configuration") -> BrokerConfig:
    """Validate a parsed TOML document and build a ``BrokerConfig``."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS:
            values[key] = _build(_SECTIONS[key], value, key, source)
        elif key in _TABLE_ARRAYS:
            values[key] = _build_array(key, value, source)
        else:
            known = ", ".join(sorted([*_SECTIONS, *_TABLE_ARRAYS]))
            if isinstance(value, (dict, list)):
                nearest = _nearest(key, [*_SECTIONS, *_TABLE_ARRAYS])
                raise ConfigError(f"unknown section '{key}' in {source}:{nearest} (known: {known})")
            raise ConfigError(
                f"unknown key '{key}' in {source}: a configuration's keys belong in its sections ({known})"
            )
    transport = values.get("transport", TransportConfig())
    if transport.partial_frame_memory_limit < transport.max_frame_size:
        raise ConfigError(
            f"'transport.partial_frame_memory_limit' ({transport.partial_frame_memory_limit}) is below "
            f"'transport.max_frame_size' ({transport.max_frame_size}) in {source}: the largest frame could never arrive"
        )
    names = [u.name for u in values.get("users", ())]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"user {duplicates[0]!r} is defined more than once in {source}")
    return BrokerConfig(**values)


_TABLE_ARRAYS.update({"destination_policy": PolicyEntry, "users": User, "authorization": AuthorizationEntry})


def default_config_text() -> str:
    """The embedded default configuration, as TOML text."""
    return resources.files("minibroker").joinpath("default.toml").read_text(encoding="utf-8")


def load_config(path: str | Path | None = None) -> BrokerConfig:
    """Load ``path`` (or the embedded default) and validate it."""
    if path is None:
        return parse_config(tomllib.loads(default_config_text()), "the default configuration")
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file '{p}': {exc.strerror}") from None
    try:
        data = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file '{p}' is not valid TOML: {exc}") from None
    return parse_config(data, f"'{p}'")
