"""Hand-written broker traces: one with every seed's pathology at a known time, one clean.

Built with ``MemoryTrace`` on a virtual clock, so they are also a check that the
writer's output is what the Spark jobs read. The expected findings sit next to
each scenario; times are seconds from the first event (t = 0).
"""

from __future__ import annotations

from pathlib import Path

from minibroker.trace import MemoryTrace


class Script:
    """A virtual clock and a trace; ``at(t).emit(...)`` writes events at time t."""

    def __init__(self, broker: str = "b1") -> None:
        self.now = 0.0
        self.trace = MemoryTrace(lambda: self.now, broker=broker)
        self._msg = 0

    def at(self, t: float) -> MemoryTrace:
        assert t >= self.now, (t, self.now)
        self.now = t
        return self.trace

    def message(self, t: float, session: str, dest: str, *, cached: bool = True) -> str:
        self._msg += 1
        msg = f"ID:b1-{self._msg}"
        tr = self.at(t)
        tr.emit("send", session=session, dest=dest, msg=msg, size=1024, persistent=True, priority=4)
        tr.emit("enqueue", dest=dest, msg=msg, size=1024, persistent=True, priority=4, cached=cached)
        return msg

    def deliver(self, t: float, session: str, sub: str, dest: str, msg: str, *, ack: bool = True) -> None:
        tr = self.at(t)
        tr.emit("dispatch", session=session, sub=sub, dest=dest, msg=msg, size=1024)
        if ack:
            tr.emit("ack", session=session, sub=sub, dest=dest, msg=msg, mode="client-individual")

    def usage(self, t: float, mem: int, store: int = 1, temp: int = 0, **dest: object) -> None:
        self.at(t).emit("usage", mem_pct=mem, store_pct=store, temp_pct=temp, **dest)

    def connect(self, t: float, session: str, client_id: str | None = None) -> None:
        self.at(t).emit("connect", session=session, client_id=client_id)

    def subscribe(self, t: float, session: str, sub: str, dest: str, prefetch: int = 1000) -> None:
        self.at(t).emit("subscribe", session=session, sub=sub, dest=dest, ack="client-individual", prefetch=prefetch)

    def write(self, path: Path) -> Path:
        self.trace.dump(path)
        return path


def pathologies() -> Script:
    """Seeds 000-004, one after another on one broker."""
    s = Script()
    # the starving consumers: /queue/A has 5 messages in the store only; /queue/B fills memory to 70%
    s.at(0.0).emit("recover", dest="/queue/A", count=5)
    s.usage(0.0, 0)
    s.connect(0.0, "p1", "producer-b")
    b_msgs = []
    for i in range(10):
        t = 1.0 + i
        b_msgs.append(s.message(t, "p1", "/queue/B"))
        s.usage(t + 0.5, 7 * (i + 1), dest="/queue/B", dest_mem_pct=7 * (i + 1))
    s.connect(12.0, "cA", "consumer-a")
    s.subscribe(12.0, "cA", "a", "/queue/A")
    for t in range(12, 30):
        s.at(float(t) + 0.25).emit(
            "page_in_blocked",
            dest="/queue/A",
            pending=5,
            mem_pct=70,
            dest_mem_pct=0,
            hwm=70,
            policy="legacy",
            consumers=1,
        )
    # a consumer on B arrives at 30 and drains it; memory falls at 31, A pages in
    s.connect(30.0, "cB", "consumer-b")
    s.subscribe(30.0, "cB", "b", "/queue/B")
    for i, msg in enumerate(b_msgs):
        s.deliver(30.0 + i * 0.1, "cB", "b", "/queue/B", msg)
    s.usage(31.0, 40, dest="/queue/B", dest_mem_pct=0)
    s.at(31.0).emit("page_in", dest="/queue/A", count=5, mem_pct=41, dest_mem_pct=1)
    for i in range(5):
        s.deliver(31.5 + i, "cA", "a", "/queue/A", f"ID:b1-old-{i}")
    s.usage(38.0, 0, dest="/queue/A", dest_mem_pct=0)

    # the temp-storage deadlock: a topic with two subscribers; swaps, temp fills, the producer stays blocked
    for sess, sub in (("cT1", "t1"), ("cT2", "t2")):
        s.connect(39.0, sess)
        s.subscribe(39.0, sess, sub, "/topic/T", prefetch=32767)
    s.connect(39.0, "pT", "producer-t")
    topic_msgs = []
    for i in range(10):
        msg = s.message(40.0 + i, "pT", "/topic/T")
        topic_msgs.append(msg)
        if 5 <= i <= 7:  # t2's file cursor swaps at 45.2, 46.2, 47.2
            s.at(40.2 + i).emit(
                "swap_out",
                dest="/topic/T",
                sub="t2",
                count=95 + i,
                temp_pct=40 + 30 * (i - 5),
                session="cT2",
                bytes=102400,
                mem_pct=70,
            )
        s.deliver(40.5 + i, "cT1", "t1", "/topic/T", msg, ack=False)
    s.usage(49.75, 60, temp=105)
    s.at(50.0).emit("flow_block", session="pT", dest="/topic/T", usage="temp", pct=105)
    for i, msg in enumerate(topic_msgs[:4]):
        s.deliver(50.5 + i, "cT2", "t2", "/topic/T", msg, ack=False)
    s.usage(54.0, 10, temp=102)

    # slow consumers on a topic: t2 marked slow from 60 to 70
    s.at(60.0).emit("slow_consumer", session="cT2", sub="t2", dest="/topic/T", slow=True, pending=65534, prefetch=32767)
    s.at(65.0).emit("slow_consumer", session="cT2", sub="t2", dest="/topic/T", slow=True, pending=70000, prefetch=32767)
    s.at(70.0).emit("slow_consumer", session="cT2", sub="t2", dest="/topic/T", slow=False, pending=100)

    # the stalled socket: writes to consumer-q stuck 10 s, then its reconnect is refused
    s.connect(71.0, "cQ", "consumer-q")
    s.subscribe(71.0, "cQ", "q", "/queue/Q")
    for i in range(3):
        msg = s.message(71.5 + i, "p1", "/queue/Q")
        s.deliver(71.6 + i, "cQ", "q", "/queue/Q", msg, ack=i == 0)
    for t in (75.0, 80.0):  # no write timeout: the samples show the socket taking nothing
        s.at(t).emit(
            "connection",
            session="cQ",
            client_id="consumer-q",
            pending_bytes=262144,
            pending=2,
            idle_read=t - 74.0,
            idle_write=t - 70.0,
        )
    s.at(80.0).emit("disconnect", session="cQ", reason="eof", client_id="consumer-q")
    s.connect(81.0, "cQ2", "consumer-q")
    s.at(81.0).emit(
        "error",
        message="Client consumer-q already connected",
        session="cQ2",
        client_id="consumer-q",
        code="client_id_in_use",
        fatal=True,
    )

    # one connection that consumes and publishes: w1's SEND to /queue/R held from 82 s to the end,
    # while it holds 50 unacknowledged messages (the ACKs that would free the memory wait behind it);
    # /queue/R's consumer a1 has nothing to do, which is not the temp-store pathology
    s.connect(82.0, "w1", "worker")
    s.connect(82.0, "a1", "auditor")
    s.subscribe(82.0, "a1", "r", "/queue/R")
    s.at(82.0).emit("flow_block", session="w1", dest="/queue/R", usage="memory", pct=100)
    # a poison message: /queue/P's ID:poison redelivered 30 times in 1.45 s
    for i in range(30):
        t = 82.0 + i * 0.05
        s.at(t).emit(
            "redeliver", dest="/queue/P", msg="ID:poison", redeliveries=i + 1, reason="nack", session="c9", sub="p"
        )
        if i % 10 == 5:
            s.at(t).emit("connection", session="w1", pending_bytes=0, pending=50, idle_read=t - 82.0, idle_write=0.0)

    # a KahaDB journal kept alive by one message: 16 files for 1 live message, s7 held on the full store
    s.at(83.5).emit(
        "journal_roll",
        store="kahadb",
        layout="growing",
        file="db-16.log",
        files=16,
        prev="db-15.log",
        live=1,
        file_live={f"db-{i}.log": (1 if i == 1 else 0) for i in range(1, 17)},
    )
    s.at(83.5).emit("flow_block", session="s7", dest="/queue/S", usage="store", pct=100)

    # Qpid's enqueue threshold: the ring journal of /queue/J is full with 7 live messages in 7 files
    file_live = {f"{i:04d}.jdat": (1 if i < 7 else 0) for i in range(8)}
    s.at(84.0).emit(
        "journal_roll",
        store="/queue/J",
        layout="ring",
        file="0007.jdat",
        files=8,
        prev="0006.jdat",
        live=1,
        file_live=file_live,
    )
    for t in (85.0, 86.0):
        s.at(t).emit(
            "journal_full",
            store="/queue/J",
            layout="ring",
            file="0000.jdat",
            files=8,
            live=7,
            file_live=file_live,
            dest="/queue/J",
            live_bytes=2135,
            capacity=12582912,
        )
        s.at(t).emit(
            "error",
            message='Enqueue capacity threshold exceeded on queue "/queue/J".',
            session="p1",
            code="enqueue_threshold",
            dest="/queue/J",
            fatal=False,
        )
    s.usage(90.0, 10, temp=102)
    return s


# (detector, start, end, dest, session, sub) expected from pathologies() with the test params
EXPECTED = [
    ("starved_consumer", 12.0, 31.0, "/queue/A", "cA", "a"),
    ("swap_storm", 45.2, 48.2, "/topic/T", None, None),
    ("blocked_producer_idle_consumers", 54.0, 90.0, "/topic/T", "pT", None),
    ("slow_consumer", 60.0, 70.0, "/topic/T", "cT2", "t2"),
    ("stalled_socket", 70.0, 80.0, None, "cQ", None),
    ("journal_full_few_live", 85.0, 87.0, "/queue/J", None, None),
    ("blocked_holding_unacked", 82.0, 90.0, "/queue/R", "w1", None),
    ("redelivery_loop", 82.0, 84.45, "/queue/P", None, None),
    ("store_held_by_few_live", 83.5, 90.0, "/queue/S", "s7", None),
]


def healthy() -> Script:
    """Busy but healthy: balanced queues, one short block, one swap, journal rolls."""
    s = Script()
    s.usage(0.0, 0)
    s.connect(0.0, "p", "producer")
    s.connect(0.0, "c", "consumer")
    s.subscribe(0.0, "c", "0", "/queue/W")
    extra = {  # message index -> events just after it
        78: ("flow_block", dict(session="p", dest="/queue/W", usage="memory", pct=100)),
        80: ("connection", dict(session="p", pending_bytes=0, pending=3, idle_read=0.1, idle_write=0.0)),
        82: ("flow_unblock", dict(session="p", dest="/queue/W", usage="memory", waited=1.0)),
        90: ("redeliver", dict(dest="/queue/W", msg="ID:b1-90", redeliveries=1)),
        91: ("redeliver", dict(dest="/queue/W", msg="ID:b1-90", redeliveries=2)),
        92: ("redeliver", dict(dest="/queue/W", msg="ID:b1-90", redeliveries=3)),
        100: ("flow_block", dict(session="p", dest="/queue/W", usage="store", pct=100)),
        104: ("flow_unblock", dict(session="p", dest="/queue/W", usage="store", waited=1.0)),
        120: ("swap_out", dict(dest="/topic/X", sub="x", count=10, temp_pct=1)),
        124: ("swap_in", dict(dest="/topic/X", sub="x", count=10, temp_pct=0)),
        160: (
            "journal_roll",
            dict(
                store="kahadb",
                layout="growing",
                file="db-2.log",
                files=2,
                prev="db-1.log",
                live=0,
                file_live={"db-1.log": 0, "db-2.log": 3},
            ),
        ),
    }
    for i in range(200):
        t = 0.5 + i * 0.25
        msg = s.message(t, "p", "/queue/W")
        s.deliver(t + 0.1, "c", "0", "/queue/W", msg)
        if i % 20 == 0:
            s.usage(t + 0.15, 20 + i // 20, dest="/queue/W", dest_mem_pct=1)
        if i in extra:
            event, fields = extra[i]
            s.at(t + 0.2).emit(event, **fields)
    # a consumer of /queue/V that reconnects again and again: its one message comes back 20 times
    # in a second, each time because its consumer went away, never refused: no redelivery loop
    for i in range(20):
        s.at(50.4 + i * 0.05).emit("redeliver", dest="/queue/V", msg="ID:v-1", redeliveries=i + 1, reason="closed")
    s.at(52.0).emit("disconnect", session="c", reason="client")
    s.at(52.0).emit("disconnect", session="p", reason="client")
    return s
