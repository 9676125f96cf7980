"""The emits behind tests/data/sample-trace.jsonl: every event type at least once.

Regenerate the file after changing this list:
    .venv/bin/python -m tests.spark.sample_events > tests/data/sample-trace.jsonl
(or from tests/spark: python sample_events.py). Keep it a short, coherent story.
"""

from __future__ import annotations

from typing import Any

BROKER = "b1"

# (ts, event, fields) in emit order.
SAMPLE: list[tuple[float, str, dict[str, Any]]] = [
    (0.0, "start", {}),
    (0.0, "recover", {"dest": "/queue/A", "count": 3, "bytes": 3072}),
    (0.0, "usage", {"mem_pct": 0, "store_pct": 1, "temp_pct": 0}),
    (
        0.5,
        "connect",
        {"session": "s1", "client_id": "producer-1", "addr": "127.0.0.1:50001", "version": "1.2", "heart_beat": "0,0"},
    ),
    (
        0.5,
        "connect",
        {"session": "s2", "client_id": None, "addr": "127.0.0.1:50002", "version": "1.2", "heart_beat": "10000,10000"},
    ),
    (
        1.0,
        "subscribe",
        {
            "session": "s2",
            "sub": "0",
            "dest": "/queue/A",
            "ack": "client-individual",
            "prefetch": 1,
            "selector": "type = 'order'",
            "durable": None,
            "exclusive": False,
        },
    ),
    (1.0, "page_in", {"dest": "/queue/A", "count": 3, "mem_pct": 1, "dest_mem_pct": 1}),
    (
        1.25,
        "send",
        {"session": "s1", "dest": "/queue/A", "msg": "ID:b1-1-1", "size": 1024, "persistent": True, "priority": 4},
    ),
    (
        1.25,
        "enqueue",
        {
            "dest": "/queue/A",
            "msg": "ID:b1-1-1",
            "size": 1024,
            "persistent": True,
            "priority": 4,
            "cached": True,
            "session": "s1",
        },
    ),
    (1.25, "usage", {"mem_pct": 2, "store_pct": 1, "temp_pct": 0, "dest": "/queue/A", "dest_mem_pct": 2}),
    (
        1.5,
        "dispatch",
        {
            "session": "s2",
            "sub": "0",
            "dest": "/queue/A",
            "msg": "ID:b1-1-1",
            "size": 1024,
            "redelivered": False,
            "priority": 4,
        },
    ),
    (1.75, "ack", {"session": "s2", "sub": "0", "dest": "/queue/A", "msg": "ID:b1-1-1", "mode": "client-individual"}),
    (2.0, "dispatch", {"session": "s2", "sub": "0", "dest": "/queue/A", "msg": "ID:b1-0-1", "size": 1024}),
    (2.25, "nack", {"session": "s2", "sub": "0", "dest": "/queue/A", "msg": "ID:b1-0-1"}),
    (2.25, "redeliver", {"dest": "/queue/A", "msg": "ID:b1-0-1", "redeliveries": 1, "session": "s2", "sub": "0"}),
    (2.5, "dlq", {"dest": "/queue/A", "msg": "ID:b1-0-1", "dlq": "/queue/ActiveMQ.DLQ", "reason": "max_redeliveries"}),
    (3.0, "expire", {"dest": "/queue/A", "msg": "ID:b1-0-2"}),
    (
        3.5,
        "send",
        {
            "session": "s1",
            "dest": "/queue/B",
            "msg": "ID:b1-1-2",
            "size": 70000,
            "persistent": True,
            "priority": 9,
            "tx": "tx-1",
        },
    ),
    (
        3.5,
        "enqueue",
        {"dest": "/queue/B", "msg": "ID:b1-1-2", "size": 70000, "persistent": True, "priority": 9, "cached": False},
    ),
    (3.5, "usage", {"mem_pct": 70, "store_pct": 3, "temp_pct": 0, "dest": "/queue/B", "dest_mem_pct": 70}),
    (
        4.0,
        "page_in_blocked",
        {
            "dest": "/queue/A",
            "pending": 1,
            "mem_pct": 70,
            "dest_mem_pct": 0,
            "hwm": 70,
            "policy": "legacy",
            "consumers": 1,
        },
    ),
    (4.5, "flow_block", {"session": "s1", "dest": "/queue/B", "usage": "memory", "pct": 100, "msg": "ID:b1-1-3"}),
    (6.0, "flow_unblock", {"session": "s1", "dest": "/queue/B", "usage": "memory", "waited": 1.5, "pct": 99}),
    (
        6.5,
        "subscribe",
        {
            "session": "s2",
            "sub": "t1",
            "dest": "/topic/prices",
            "ack": "auto",
            "prefetch": 32767,
            "durable": "prices-audit",
        },
    ),
    (
        7.0,
        "swap_out",
        {
            "dest": "/topic/prices",
            "sub": "t1",
            "count": 500,
            "temp_pct": 40,
            "session": "s2",
            "bytes": 512000,
            "mem_pct": 70,
        },
    ),
    (
        7.5,
        "swap_in",
        {"dest": "/topic/prices", "sub": "t1", "count": 200, "temp_pct": 30, "session": "s2", "bytes": 204800},
    ),
    (
        7.75,
        "discard",
        {"dest": "/topic/prices", "msg": "ID:b1-1-9", "reason": "slow_consumer", "session": "s2", "sub": "t1"},
    ),
    (
        8.0,
        "slow_consumer",
        {"session": "s2", "sub": "t1", "dest": "/topic/prices", "slow": True, "pending": 65534, "prefetch": 32767},
    ),
    (9.0, "slow_consumer", {"session": "s2", "sub": "t1", "dest": "/topic/prices", "slow": False, "pending": 10}),
    (9.5, "unsubscribe", {"session": "s2", "sub": "t1", "dest": "/topic/prices", "reason": "client"}),
    (
        10.0,
        "journal_roll",
        {
            "store": "/queue/A",
            "layout": "ring",
            "file": "0001.jdat",
            "files": 8,
            "prev": "0000.jdat",
            "live": 1,
            "file_live": {"0000.jdat": 1, "0001.jdat": 0},
        },
    ),
    (
        11.0,
        "journal_full",
        {
            "store": "/queue/A",
            "layout": "ring",
            "file": "0000.jdat",
            "files": 8,
            "live": 7,
            "file_live": {
                "0000.jdat": 1,
                "0001.jdat": 1,
                "0002.jdat": 1,
                "0003.jdat": 1,
                "0004.jdat": 1,
                "0005.jdat": 1,
                "0006.jdat": 1,
                "0007.jdat": 0,
            },
            "dest": "/queue/A",
            "live_bytes": 2135,
            "capacity": 12582912,
        },
    ),
    (
        11.0,
        "error",
        {
            "message": 'Enqueue capacity threshold exceeded on queue "/queue/A".',
            "session": "s1",
            "code": "enqueue_threshold",
            "dest": "/queue/A",
            "fatal": False,
        },
    ),
    (
        11.5,
        "connection",
        {
            "session": "s2",
            "pending_bytes": 262144,
            "pending": 1000,
            "idle_read": 3.5,
            "idle_write": 29.0,
            "addr": "127.0.0.1:50002",
        },
    ),
    (
        12.0,
        "write_timeout",
        {"session": "s2", "waited": 30.5, "pending_bytes": 262144, "client_id": None, "addr": "127.0.0.1:50002"},
    ),
    (12.0, "disconnect", {"session": "s2", "reason": "write_timeout"}),
    (12.5, "unsubscribe", {"session": "s2", "sub": "0", "dest": "/queue/A", "reason": "disconnect"}),
    (13.0, "connect", {"session": "s3", "client_id": "producer-1", "addr": "127.0.0.1:50003", "version": "1.2"}),
    (
        13.0,
        "error",
        {
            "message": "Client producer-1 already connected",
            "session": "s3",
            "client_id": "producer-1",
            "code": "client_id_in_use",
            "fatal": True,
        },
    ),
    (13.0, "disconnect", {"session": "s3", "reason": "error", "client_id": "producer-1"}),
    (14.0, "disconnect", {"session": "s1", "reason": "client", "client_id": "producer-1"}),
    (
        14.0,
        "journal_state",
        {
            "store": "/queue/A",
            "layout": "ring",
            "file": "0000.jdat",
            "files": 8,
            "live": 0,
            "file_live": {"0000.jdat": 0, "0001.jdat": 0},
        },
    ),
    # client side, as the replay driver would write them (one trace may hold both)
    (
        14.25,
        "sent",
        {"client": "prod-0", "dest": "/queue/A", "msg": "prod-0:1", "size": 1024, "persistent": True, "priority": 4},
    ),
    (
        14.5,
        "received",
        {
            "client": "cons-0",
            "sub": "0",
            "dest": "/queue/A",
            "msg": "ID:b1-1-1",
            "size": 1024,
            "redelivered": False,
            "latency": 0.25,
        },
    ),
    (
        14.75,
        "acked",
        {"client": "cons-0", "sub": "0", "dest": "/queue/A", "msg": "ID:b1-1-1", "mode": "client-individual"},
    ),
]


def write_sample(sink: Any) -> None:
    """Emit SAMPLE through the real writer into ``sink`` (a path or text file)."""
    from minibroker.trace import Trace

    times = iter([ts for ts, _, _ in SAMPLE])
    trace = Trace(sink, clock=lambda: next(times), broker=BROKER, buffer_events=4)
    for _, event, fields in SAMPLE:
        trace.emit(event, **fields)
    trace.close()


if __name__ == "__main__":
    import sys

    write_sample(sys.stdout)
