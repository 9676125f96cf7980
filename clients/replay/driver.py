"""The replay scheduler: actions in time order, handed to their clients when due.

Theory of operation
-------------------
One asyncio task reads the action table lazily (``source``) and, for each
row, waits until ``start + t / speed`` on the loop's monotonic clock, then
pushes the row to its client (``actor.ReplayClient``, created on first
sight), which performs its rows in order on its own task. Everything that is
due (or due within ``EARLY`` seconds: finer sleeps cost more than they are
worth on asyncio's timers) is pushed without sleeping; while behind, the scheduler still
yields every ``BATCH`` rows so the clients and the sockets get to run, and it
stops reading once ``max_pending`` rows wait in clients (a broker that holds
its producers back would otherwise grow those queues without bound: the rows
are late either way, and their lag says so).

The replayer is also the one place that counts and traces: ``sent``,
``received`` and ``acked`` go to the counters and to the client-side trace
(``minibroker.trace.Trace``, epoch seconds, the schema of
docs/trace-schema.md), each action's lag to a histogram, errors to the
error log (each new message is printed at once). A ticker flushes the trace
and redraws the progress bar twice a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from clients.spark.actions import Action
from clients.stomp import Message, StompClient
from minibroker.trace import NullTrace, Trace

from .actor import ReplayClient
from .options import ReplayOptions
from .progress import Progress
from .report import ReplayReport
from .stats import Counters, ErrorLog, Histogram

__all__ = ["Replayer"]

BATCH = 64  # rows pushed between yields while behind schedule
EARLY = 0.0005  # seconds: a row due this soon is pushed now
TICK = 0.5  # seconds between trace flushes and progress redraws


class Replayer:
    """Plays actions against one broker; see the module doc."""

    def __init__(
        self,
        options: ReplayOptions,
        *,
        trace: Trace | NullTrace | Any = None,
        progress: Progress | None = None,
        describe: Callable[[BaseException], str] = str,
        warn: Callable[[str], None] = print,
    ) -> None:
        self.options = options
        self.trace = trace if trace is not None else NullTrace()
        self._tracing = self.trace.enabled
        self.progress = progress
        self._describe = describe
        self._warn = warn
        self.counters = Counters()
        self.lag_hist = Histogram()
        self.latency = Histogram()
        self.errors = ErrorLog()
        self.clients: dict[str, ReplayClient] = {}
        self._pending = 0  # rows pushed and not yet taken by their client
        self._room: asyncio.Future[None] | None = None
        self.recent_lag = 0.0  # the worst lag since the progress bar was last drawn
        self._start = self._end = self._last_due = 0.0  # loop times
        self.table_t = 0.0

    # ------------------------------------------------------------- the run
    async def run(self, actions: Iterable[Action]) -> ReplayReport:
        """Play ``actions`` (in time order) to the end; return the report."""
        loop = asyncio.get_running_loop()
        self._start = self._end = self._last_due = loop.time()
        ticker = loop.create_task(self._tick())
        try:
            await self._schedule(actions, self._start)
            for client in self.clients.values():
                client.finish()
            await asyncio.gather(*(c.task for c in self.clients.values()))
        finally:
            ticker.cancel()
            for client in self.clients.values():  # interrupted: leave nothing behind
                if not client.task.done():
                    client.task.cancel()
                if client.client is not None:
                    client.client.close()
            self.trace.flush()
            self._end = loop.time()
            if self.progress is not None:
                self.progress.close()
        return self.report()

    def report(self) -> ReplayReport:
        """What was done so far (all of it once ``run`` has returned)."""
        return ReplayReport(
            self.counters,
            self.lag_hist,
            self.latency,
            self.errors,
            self._end - self._start,
            self._last_due - self._start,
            len(self.clients),
            self.trace.written,
        )

    async def _schedule(self, actions: Iterable[Action], start: float) -> None:
        loop = asyncio.get_running_loop()
        speed = self.options.speed
        clients = self.clients
        limit = self.options.max_pending
        burst = 0
        for action in actions:
            due = self._last_due = start + action.t / speed
            self.table_t = action.t
            wait = due - loop.time()
            if wait > EARLY:
                await asyncio.sleep(wait)
                burst = 0
            elif burst >= BATCH:
                await asyncio.sleep(0)
                burst = 0
            burst += 1
            if self._pending >= limit:
                self._room = loop.create_future()
                await self._room
                self._room = None
            client = clients.get(action.client)
            if client is None:
                client = clients[action.client] = ReplayClient(action.client, self.options, self)
            self._pending += 1
            client.push(action, due)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TICK)
            self.trace.flush()
            if self.progress is not None:
                self.progress.update(loop.time() - self._start, self.table_t, self)
            self.recent_lag = 0.0

    # ---------------------- called by the clients (hot): actor.ReplayEvents
    def dequeued(self) -> None:
        self._pending -= 1
        room = self._room
        if room is not None and not room.done() and self._pending < self.options.max_pending // 2:
            room.set_result(None)

    def lag(self, seconds: float, action: Action) -> None:
        if seconds > self.recent_lag:
            self.recent_lag = seconds
        self.lag_hist.record(seconds, action.t)

    def performed(self, kind: str) -> None:
        self.counters.actions[kind] += 1

    def skip(self) -> None:
        self.counters.skipped += 1

    def sent(self, client: str, dest: str, msg: str, size: int, persistent: bool | None, priority: int | None) -> None:
        c = self.counters
        c.sent += 1
        c.sent_bytes += size
        if self._tracing:
            self.trace.emit(
                "sent",
                client=client,
                dest=dest,
                msg=msg,
                size=size,
                persistent=bool(persistent),
                priority=4 if priority is None else priority,
            )

    def received(self, client: str, sub: str, dest: str, message: Message) -> None:
        now = time.time()
        c = self.counters
        c.received += 1
        size = len(message.body)
        c.received_bytes += size
        headers = message.headers
        latency = None
        stamp = headers.get("replay-ts")
        if stamp is not None:
            try:
                latency = now - float(stamp)
            except ValueError:
                pass
            else:
                self.latency.record(latency)
        redelivered = headers.get("redelivered") == "true"
        if redelivered:
            c.redelivered += 1
        if self._tracing:
            fields: dict[str, Any] = {
                "client": client,
                "sub": sub,
                "dest": headers.get("destination") or dest,
                "msg": headers.get("message-id") or headers.get("replay-id", ""),
                "size": size,
            }
            if redelivered:
                fields["redelivered"] = True
            if latency is not None:
                fields["latency"] = round(latency, 6)
            self.trace.emit("received", **fields)

    def acked(self, client: str, sub: str, dest: str, message: Message, mode: str) -> None:
        self.counters.acked += 1
        if self._tracing:
            headers = message.headers
            self.trace.emit(
                "acked",
                client=client,
                sub=sub,
                dest=headers.get("destination") or dest,
                msg=headers.get("message-id") or headers.get("replay-id", ""),
                mode=mode,
            )

    # ------------------------------------------------ connections and errors
    def take_connection(self) -> bool:
        c = self.counters
        if c.connected >= self.options.max_clients:
            return False
        c.connected += 1
        c.peak_connected = max(c.peak_connected, c.connected)
        return True

    def release_connection(self) -> None:
        self.counters.connected -= 1

    def connected(self, name: str, client: StompClient, client_id: str | None) -> None:
        if self._tracing:
            fields: dict[str, Any] = {
                "session": client.session or name,
                "client": name,
                "version": client.version,
                "heart_beat": f"{client.heartbeat[0]},{client.heartbeat[1]}",
            }
            if client_id is not None:
                fields["client_id"] = client_id
            self.trace.emit("connect", **fields)

    def disconnected(self, name: str, client: StompClient, reason: str) -> None:
        if self._tracing:
            self.trace.emit("disconnect", session=client.session or name, reason=reason, client=name)

    def error(self, client: str, doing: str, exc: BaseException) -> None:
        text = f"{doing}: {self._describe(exc)}"
        if self.errors.add(client, text):
            if self.progress is not None:
                self.progress.clear()
            self._warn(f"client {client}: {text}")
        if self._tracing:
            self.trace.emit("error", message=f"client {client}: {text}", code="replay_" + doing)
