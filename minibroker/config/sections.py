"""The single-table sections: ``[broker]``, ``[transport]``, ``[console]``,
``[system_usage]``, ``[store]`` and ``[temp_destination_authorization]``.

Each is a frozen dataclass whose fields are declared with ``values.option``: the
field's default is the option's default, its metadata the parser and the doc.
"""

from __future__ import annotations

from dataclasses import dataclass

from minibroker.eventloop import LOOPS
from storage.model import MIN_FILE_SIZE

from .values import (
    boolean,
    choice,
    heart_beat,
    integer,
    listener_port,
    number,
    option,
    size,
    size_at_least,
    string_list,
    text,
)

__all__ = [
    "BrokerSection",
    "ConsoleConfig",
    "StoreConfig",
    "SystemUsageConfig",
    "TempDestinationAuthorization",
    "TransportConfig",
]

_journal_file_size = size_at_least(MIN_FILE_SIZE, "a journal file holds its header and at least one record")


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
class TempDestinationAuthorization:
    """``[temp_destination_authorization]``: who may send to another connection's
    temporary destination (ActiveMQ's ``tempDestinationAuthorizationEntry``)."""

    write: tuple[str, ...] = option(
        (),
        string_list,
        "groups (or users) that may send to a temporary destination they do not own (a reply-to); "
        "only its owner ever consumes from one",
    )
