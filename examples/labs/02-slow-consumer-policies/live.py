"""Lab 02 against the real server on real sockets (``minibroker lab run 02 --live``).

The same workload as ``scenario.py`` (the same subscribers in the same order,
the same synchronous producer, the same verdict and cost table), played with
our asyncio client (``clients.stomp``) against ``lab.live_broker()`` on
loopback. What differs, and why:

- **Four times faster, a third as long.** The virtual run's 30 s would make
  eight runs four minutes of wall clock, so every rate is four times the
  virtual one (the producer up to 200 msg/s, the slow consumer 40 acks/s) and
  every duration of the policies a quarter (a consumer is aborted after
  1.25 s slow instead of 5 s, checked every 0.25 s; the write timeout is
  1.25 s); a run lasts 10 s, its rates measured from t=5 s.
- **Bigger messages, more memory.** Loopback's kernel takes megabytes for a
  socket that is not read (Linux grows a socket's send queue up to
  ``tcp_wmem``'s maximum, 4 MB by default), and only then does the broker's
  own buffer fill and its write timeout start counting. So the messages are
  8000 bytes (the kernel is full within a few seconds), and the broker's
  memory is 2 MB, which holds about as many of them (256) as 512 KB holds of
  the virtual run's 1000-byte ones, so the pending limit of 100 still fits
  in memory.
- **The verdict is about the slow one's pace.** A loaded machine may not
  reach 200 msg/s at all, so "held back" means here that the fast consumers
  get less than twice the slow consumer's 40 msg/s (in ``block`` they get
  its pace, in the healthy runs what the machine and the producer give).

The broker writes its trace to the run's directory; its events are read
after the run, with their times counted from the run's start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clients.labs import LabRun
from clients.stomp import StompClient, StompClientError
from clients.stomp.message import Message
from minibroker.config import BrokerConfig
from minibroker.ops import statistics_replies

TOPIC = "/topic/ticks"
SUBSCRIBERS = ("fast-1", "slow", "fast-2", "fast-3")  # dispatch order, as on the virtual clock
SLOW_PREFETCH = 10
#: How much faster than the virtual clock the live run goes (rates up, durations down).
SPEED = 4
RATE, SLOW_RATE = 50 * SPEED, 10 * SPEED
SECONDS, WINDOW_FROM = 10.0, 5.0
BODY = "x" * 8000
MEMORY = 2 * 1024 * 1024
#: The stuck subscriber's SO_RCVBUF (the kernel doubles it).
STUCK_RCVBUF = 4096
KB = 1024


def live_config(config: BrokerConfig, trace: Path | None) -> BrokerConfig:
    """The run's configuration for the wall clock: the policies' durations a ``SPEED``-th
    (and the trace written to ``trace``, when given)."""
    policies = tuple(
        dataclasses.replace(
            p,
            max_slow_duration=p.max_slow_duration // SPEED,
            abort_slow_consumer_check_period=max(1, p.abort_slow_consumer_check_period // SPEED),
        )
        for p in config.destination_policy
    )
    timeout = config.transport.so_write_timeout
    return config.replace(
        broker={"trace": str(trace)} if trace is not None else {},
        system_usage={"memory_limit": MEMORY},
        transport={"so_write_timeout": timeout // SPEED if timeout else 0},
        destination_policy=policies,
    )


def live_pace(pace_type: Any) -> Any:
    """The live run's ``Pace``: held back means under twice the slow consumer's pace."""
    return pace_type(RATE, SLOW_RATE, SECONDS, WINDOW_FROM, 2 * SLOW_RATE, len(BODY))


def play_on(port: int, stuck: bool) -> dict[str, Any]:
    """The live workload against any broker on ``port``: what its clients saw (ActiveMQ's
    side of ``lab run 02 --against activemq``; no broker figures)."""
    figures, _ = asyncio.run(_Workload(port, stuck, lambda ports: {}).play())
    return figures


def play(lab: LabRun, seen_type: Any, pace_type: Any) -> Any:
    """Play the run live; what it saw, as the scenario's ``Seen`` (with its ``Pace``)."""
    pace = live_pace(pace_type)
    stuck = lab.name.startswith("stuck-socket")
    trace_file = lab.workdir / "trace.jsonl"
    config = live_config(lab.config, trace_file)
    policy = config.destination_policy[0]
    changed = [f"abort after {policy.max_slow_duration} ms slow"] if policy.abort_slow_consumer else []
    if config.transport.so_write_timeout:
        changed.append(f"so_write_timeout {config.transport.so_write_timeout} ms")
    lab.note(
        f"live, {SPEED} times the virtual run's pace: rates x{SPEED}, {SECONDS:.0f} s"
        + (f"; {', '.join(changed)}" if changed else "")
        + f"; {len(BODY)}-byte messages and {MEMORY // KB} KB of memory, so the kernel's socket buffers fill in seconds"
    )
    with lab.live_broker(config) as live:

        def snapshot(ports: dict[str, Any]) -> dict[str, Any]:
            return dict(live.call(lambda: _broker_side(live.server.broker, ports)))

        figures, broker_side = asyncio.run(_Workload(live.port, stuck, snapshot).play())
    # a client that stopped reading never sees its socket closed: the broker's view says it
    gone = broker_side.pop("slow_gone")
    figures["slow_closed"] = figures["slow_closed"] or gone
    started, ended = figures.pop("started"), figures.pop("ended")
    # the run's own events: the closes after its end are the lab's teardown, not the policy's
    events = [dict(e, ts=e["ts"] - started) for e in _read_trace(trace_file) if e["ts"] <= ended]
    return seen_type(
        pace=pace,
        **figures,
        **broker_side,
        events=events,
        log_lines=lab.broker_log(),
        memory_kb=MEMORY // KB,
    )


def _read_trace(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _broker_side(broker: Any, ports: dict[str, int]) -> dict[str, Any]:
    """The broker's figures at the end of the run (on its event loop): the slow (or stuck)
    consumer's and the producer's sessions are found by their sockets' ports."""

    def session(port: int) -> Any:
        return next((s for s in broker.sessions.values() if s.peer.endswith(f":{port}")), None)

    slow, producer = session(ports["slow"]), session(ports["producer"])
    topic = broker.destinations[TOPIC]
    slow_id = slow.id if slow is not None else None
    connections = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Connection") or []
    subscriptions = statistics_replies(broker, "/queue/ActiveMQ.Statistics.Subscription") or []
    return {
        "slow_gone": slow is None,
        "discarded": topic.discarded,
        "temp_kb": broker.temp_usage.peak // KB,
        "temp_pct": broker.temp_usage.peak * 100 // broker.temp_usage.limit,
        "backlog": sum(len(s.pending) for s in topic.subs if s.session.id == slow_id),
        "slow_session": ports["slow_session"] if slow is None else slow.tag,
        "producer_session": producer.tag if producer is not None else "",
        "stuck_connection": next((c for c in connections if c["connection"] == slow_id), None),
        "slow_subscription": next((s for s in subscriptions if s["connection"] == slow_id), None),
    }


class _Workload:
    """The clients of one run: three fast subscribers, a slow (or stuck) one, a producer."""

    def __init__(self, port: int, stuck: bool, snapshot: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.port = port
        self.stuck = stuck
        #: Reads the broker's side at the end of the run, before the clients leave.
        self.snapshot = snapshot
        self.t0 = 0.0
        self.sent_at: list[float] = []
        self.receipted = 0
        self.fast_received = 0
        self.slow_received = 0
        self.slow_last_seq: int | None = None
        self.inbox: deque[Message] = deque()

    def _now(self) -> float:
        return time.monotonic() - self.t0

    async def play(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The run: its clients' figures and the broker's (``snapshot``)."""
        host, port = "127.0.0.1", self.port
        clients: dict[str, StompClient] = {}
        for name in SUBSCRIBERS:
            if name != "slow":
                c = await StompClient.connect(host, port)
                await c.subscribe(TOPIC, id=name, on_message=self._fast)
            elif self.stuck:  # it takes one message, then reads nothing more
                c = await StompClient.connect(host, port, rcvbuf=STUCK_RCVBUF, max_buffered=1)
                await c.subscribe(TOPIC, id="stuck")
            else:
                c = await StompClient.connect(host, port)
                await c.subscribe(
                    TOPIC, id=name, ack="client-individual", prefetch=SLOW_PREFETCH, on_message=self._slow
                )
            clients[name] = c
        producer = await StompClient.connect(host, port)
        slow = clients["slow"]
        self.t0 = time.monotonic()
        started = time.time()
        tasks = [asyncio.create_task(self._produce(producer))]
        if not self.stuck:
            tasks.append(asyncio.create_task(self._acknowledge(slow)))
        await asyncio.sleep(WINDOW_FROM)
        marks = (self.receipted, self.fast_received, self.slow_received)
        await asyncio.sleep(SECONDS - self._now())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        span = self._now() - WINDOW_FROM
        end = self._now()
        lag = None
        if self.slow_last_seq is not None:
            lag = round(end - self.sent_at[self.slow_last_seq], 1)
        figures = {
            "started": started,
            "producer_rate": (self.receipted - marks[0]) / span,
            "fast_rate": (self.fast_received - marks[1]) / 3 / span,
            "slow_rate": (self.slow_received - marks[2]) / span,
            "lag": lag,
            "sent": len(self.sent_at),
            "slow_closed": slow.is_closed,
            "slow_errors": [dict(e.frame.headers) for e in slow.errors],
            "ended": time.time(),
        }
        ports = {
            "slow": slow.get_extra_info("sockname", ("", 0))[1],
            "producer": producer.get_extra_info("sockname", ("", 0))[1],
            "slow_session": str(slow.session),
        }
        broker_side = self.snapshot(ports)
        for c in (*clients.values(), producer):
            c.close()
        return figures, broker_side

    def _fast(self, message: Message) -> None:
        self.fast_received += 1

    def _slow(self, message: Message) -> None:
        self.slow_received += 1
        self.slow_last_seq = int(message.headers["seq"])
        self.inbox.append(message)

    async def _produce(self, producer: StompClient) -> None:
        """A synchronous producer: at each tick of its pace, one SEND if the last has its RECEIPT."""
        period = 1 / RATE
        while True:
            n = len(self.sent_at)
            self.sent_at.append(self._now())
            await producer.send(TOPIC, BODY, {"seq": str(n)}, receipt=True, timeout=None)
            self.receipted += 1
            now = self._now()
            await asyncio.sleep((int(now / period) + 1) * period - now)

    async def _acknowledge(self, slow: StompClient) -> None:
        """One ACK every 1/SLOW_RATE s, in order, until an ERROR names the subscription."""
        while True:
            await asyncio.sleep(1 / SLOW_RATE)
            if slow.is_closed or any(e.frame.headers.get("subscription") == "slow" for e in slow.errors):
                return
            if self.inbox:
                try:
                    await slow.ack(self.inbox.popleft())
                except StompClientError:
                    return


# ---------------------------------------------------------------- the student's subscriber
#: ``lab check 02 --client FILE.py``: the ticks the producer sends (6 s at its full pace), the
#: student's work per tick (the slow subscriber's pace: 20 a second), the producer's pace
#: measured from CLIENT_WINDOW_FROM s (after the broker's memory could have filled), and how
#: long the subscriber may take (a slow machine may want more).
CLIENT_TICKS = 1200
CLIENT_WORK = 0.05
CLIENT_WINDOW_FROM = 3.0
CLIENT_DEADLINE = float(os.environ.get("MINIBROKER_LAB_CLIENT_DEADLINE", "15"))


def play_client(lab: LabRun, path: Path) -> dict[str, Any]:
    """The student's slow subscriber (``consume(host, port, queue, count, work)``, ``queue`` the
    topic) against the real server with the run's configuration (live sizes), beside three fast
    auto-ack subscribers and a producer at up to RATE ticks a second, each waiting for its
    RECEIPT. What it saw: the producer's pace, and how far behind the newest tick the student's
    newest processed tick was."""
    import threading

    from clients.labs.student import run_beside

    seen: dict[str, Any] = {"sent": 0, "times": [], "index": {}}

    async def produce(port: int, subscribers: Callable[[], int], stop: threading.Event) -> None:
        fast = [await StompClient.connect("127.0.0.1", port) for _ in range(3)]

        def indexed(m: Message) -> None:  # which tick each message-id is
            seen["index"][m.headers["message-id"]] = int(m.body.split(b" ", 2)[1])

        await fast[0].subscribe(TOPIC, on_message=indexed)
        for c in fast[1:]:
            await c.subscribe(TOPIC, on_message=lambda _: None)
        producer = await StompClient.connect("127.0.0.1", port)
        # The student's subscription before the first tick, however long its process takes to
        # start (a busy machine): ticks sent before it would leave it out of the pathology.
        while subscribers() < 4 and not stop.is_set():
            await asyncio.sleep(0.05)
        for i in range(CLIENT_TICKS):
            if stop.is_set():
                break
            started = time.monotonic()
            body = f"tick {i} ".ljust(len(BODY), "x")
            await producer.send(TOPIC, body, {"seq": str(i)}, receipt=True, timeout=None)
            seen["sent"] += 1
            seen["times"].append(time.monotonic())
            await asyncio.sleep(max(0.0, 1 / RATE - (time.monotonic() - started)))
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for c in (producer, *fast):
            c.close()

    config = live_config(lab.config, None)
    with lab.live_broker(config) as live:

        def subscribers() -> int:
            topic = live.call(lambda: live.server.broker.destinations.get(TOPIC))
            return int(live.call(lambda: len(topic.subscriptions))) if topic is not None else 0

        run = run_beside(
            lambda stop: produce(live.port, subscribers, stop),
            path,
            live.port,
            TOPIC,
            CLIENT_TICKS,
            CLIENT_WORK,
            CLIENT_DEADLINE,
        )
    times, index = seen["times"], seen["index"]
    window = [t for t in times if t - times[0] >= CLIENT_WINDOW_FROM] if times else []
    rate = (len(window) - 1) / (window[-1] - window[0]) if len(window) > 1 and window[-1] > window[0] else 0.0
    newest = max((index[m] for m in run.processed if m in index), default=-1)
    return {"run": run, "sent": seen["sent"], "producer_rate": round(rate, 1), "behind": seen["sent"] - 1 - newest}
