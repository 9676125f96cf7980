"""One replayed client: a STOMP connection that performs its own actions in order.

Theory of operation
-------------------
The scheduler (``driver``) hands each action to its client when it falls due
(``push``); the client's task performs them one after another, so a client
whose broker is slow (a send waiting for a RECEIPT, a socket the broker has
stopped reading) falls behind on its own without holding up the others. The
lag of an action is the time it starts minus the time it was due. A client
reads how to replay from ``ReplayOptions`` and tells the scheduler what it
did through ``ReplayEvents`` (the counting, the tracing and the
``--max-clients`` connections are the scheduler's).

A subscription gets a consumer task (``Consumer``): it takes each message as
the application would (``Subscription.get``, so the client stops reading the
socket when too many wait, and the broker sees a slow consumer through TCP),
records it, spends the subscription's ``process`` time on it (changed by
``pace`` actions; divided by ``--speed``), then ACKs it in the client ack
modes. Messages are therefore handled one at a time per consumer, which is
what ``process`` (seconds per message) means in the workload file.

Every send carries ``replay-ts`` (the sender's epoch time) and ``replay-id``
(``CLIENT:SEQ``, the ``msg`` of the ``sent`` event); a consumer's ``latency``
is its receive time minus ``replay-ts``, so it is exact on one machine and as
good as the clocks' agreement across machines.

Failures are per client: the first error that ends the client (a refused
CONNECT, SUBSCRIBE or SEND, a lost connection) is reported and the client's
later actions are skipped. ERROR frames that do not end the connection
(ActiveMQ's ``sendFailIfNoSpace``) are counted as they come.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from clients.spark.actions import Action
from clients.stomp import Message, StompClient, StompClientError, StompError, Subscription

from .options import ReplayOptions

__all__ = ["ReplayClient", "ReplayEvents", "Consumer", "body"]

_BODIES: dict[int, bytes] = {}
_BODY_CACHE = 4096  # distinct sizes kept
FAIR_SHARE = 32  # messages a consumer handles before it yields to the event loop
_sleep = asyncio.sleep  # a consumer's processing time (tests replace it)


def body(size: int) -> bytes:
    """A body of ``size`` bytes (cached per size)."""
    data = _BODIES.get(size)
    if data is None:
        data = b"x" * size
        if len(_BODIES) < _BODY_CACHE:
            _BODIES[size] = data
    return data


class ReplayEvents(Protocol):
    """What a replayed client tells its scheduler (``driver.Replayer`` is one)."""

    def dequeued(self) -> None:
        """A pushed action was taken from the client's queue."""

    def skip(self) -> None:
        """An action was skipped: its client had failed."""

    def lag(self, seconds: float, action: Action) -> None:
        """``action`` started ``seconds`` after it was due."""

    def performed(self, kind: str) -> None:
        """An action of ``kind`` was done."""

    def sent(self, client: str, dest: str, msg: str, size: int, persistent: bool | None, priority: int | None) -> None:
        """A message was sent."""

    def received(self, client: str, sub: str, dest: str, message: Message) -> None:
        """A consumer took a message."""

    def acked(self, client: str, sub: str, dest: str, message: Message, mode: str) -> None:
        """A consumer acknowledged a message."""

    def take_connection(self) -> bool:
        """Hold one of the ``max_clients`` connections; False when all are held."""

    def release_connection(self) -> None:
        """Give back a connection taken with ``take_connection``."""

    def connected(self, name: str, client: StompClient, client_id: str | None) -> None:
        """A client connected."""

    def disconnected(self, name: str, client: StompClient, reason: str) -> None:
        """A client's connection ended (``client`` or ``error``)."""

    def error(self, client: str, doing: str, exc: BaseException) -> None:
        """A client met ``exc`` while ``doing`` something (reported once per exception)."""


class Consumer:
    """A subscription's message loop: take, record, process, ack."""

    def __init__(self, owner: ReplayClient, client: StompClient, sub: Subscription, dest: str, process: float) -> None:
        self.owner = owner
        self.client = client
        self.sub = sub
        self.dest = dest
        #: Seconds spent on each message (before ``--speed``); ``pace`` changes it.
        self.process = process
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        self.task.cancel()

    async def _run(self) -> None:
        owner, sub, client = self.owner, self.sub, self.client
        events, speed = owner.events, owner.options.speed
        ack = sub.ack != "auto"
        streak = 0
        while True:
            if streak >= FAIR_SHARE:  # many buffered messages and no process time:
                streak = 0  # let the scheduler and the other clients run
                await asyncio.sleep(0)
            streak += 1
            try:
                message = await sub.get()
            except StompError as exc:  # an ERROR frame; the subscription may go on
                if not sub.active:
                    return
                owner.error("receive", exc)
                continue
            except StompClientError:  # unsubscribed, disconnected or lost: the owner reports
                return
            events.received(owner.name, sub.id, self.dest, message)
            if self.process > 0:
                await _sleep(self.process / speed)
            if ack:
                try:
                    await client.ack(message)
                except StompClientError:
                    return
                events.acked(owner.name, sub.id, self.dest, message, sub.ack)


class ReplayClient:
    """A client of the action table: its connection, subscriptions and pending actions."""

    def __init__(self, name: str, options: ReplayOptions, events: ReplayEvents) -> None:
        self.name = name
        self.options = options
        self.events = events
        self.client: StompClient | None = None
        self.consumers: dict[str, Consumer] = {}
        #: Set by the first error that ends the client; later actions are skipped.
        self.failed = False
        self._pending: deque[tuple[Action, float]] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._finished = False
        self._errors_seen = 0  # of client.errors, looked at
        self._reported: list[BaseException] = []  # exceptions already counted
        self._counted = False  # holds one of the --max-clients connections
        self._disconnecting = False  # DISCONNECT sent on the current connection
        self.task = asyncio.get_running_loop().create_task(self._run())

    def push(self, action: Action, due: float) -> None:
        """Perform ``action`` (due at loop time ``due``) after the ones before it."""
        self._pending.append((action, due))
        self._wakeup()

    def finish(self) -> None:
        """No more actions will come: disconnect once the pending ones are done."""
        self._finished = True
        self._wakeup()

    def _wakeup(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    # ------------------------------------------------------------ the actions
    async def _run(self) -> None:
        r = self.events
        loop = asyncio.get_running_loop()
        pending = self._pending
        try:
            while True:
                while pending:
                    action, due = pending.popleft()
                    r.dequeued()
                    if self.failed:
                        r.skip()
                        continue
                    r.lag(loop.time() - due, action)
                    try:
                        await self._perform(action)
                    except (StompClientError, TimeoutError, ValueError, OSError) as exc:
                        self.error(action.action, exc)
                        self._fail()
                if self._finished:
                    break
                self._wake = loop.create_future()
                await self._wake
                self._wake = None
            await self.close()
        except (StompClientError, TimeoutError, OSError) as exc:
            self.error("disconnect", exc)
            self._fail()

    async def _perform(self, a: Action) -> None:
        await self._HANDLERS[a.action](self, a)
        self.events.performed(a.action)
        self._check_errors()

    async def _send(self, a: Action) -> None:
        client = self._client()
        headers = dict(a.headers) if a.headers else {}
        if a.persistent:
            headers["persistent"] = "true"
        if a.priority is not None:
            headers["priority"] = str(a.priority)
        msg = f"{self.name}:{a.seq}"
        headers["replay-id"] = msg
        headers["replay-ts"] = repr(time.time())
        size = a.size or 0
        await client.send(
            a.dest,  # type: ignore[arg-type]
            body(size),
            headers,  # type: ignore[arg-type]
            receipt=self.options.wants_receipt(a),
            timeout=self.options.timeout,
        )
        self.events.sent(self.name, a.dest, msg, size, a.persistent, a.priority)  # type: ignore[arg-type]

    async def _subscribe(self, a: Action) -> None:
        client = self._client()
        sub = await client.subscribe(
            a.dest,  # type: ignore[arg-type]
            id=a.sub,
            ack=a.ack or "auto",  # type: ignore[arg-type]
            prefetch=a.prefetch,
            selector=a.selector,
            headers=a.headers,
            timeout=self.options.timeout,
        )
        self.consumers[sub.id] = Consumer(self, client, sub, a.dest, a.process or 0.0)  # type: ignore[arg-type]

    async def _pace(self, a: Action) -> None:
        consumer = self.consumers.get(a.sub)  # type: ignore[arg-type]
        if consumer is not None:
            consumer.process = a.process or 0.0

    async def _unsubscribe(self, a: Action) -> None:
        consumer = self.consumers.pop(a.sub, None)  # type: ignore[arg-type]
        if consumer is not None:
            consumer.stop()
            await consumer.sub.unsubscribe(timeout=self.options.timeout)

    async def _disconnect(self, a: Action) -> None:
        await self.close()

    def _client(self) -> StompClient:
        if self.client is None or self.client.is_closed:
            raise StompClientError("not connected (no connect action before this one)")
        return self.client

    async def _connect(self, a: Action) -> None:
        o = self.options
        if self.client is not None and not self.client.is_closed and not self._disconnecting:
            raise StompClientError("connect while connected")
        if not self.events.take_connection():
            raise StompClientError(f"not connected: {o.max_clients} connections are already open (--max-clients)")
        self._counted = True
        client_id = a.client_id
        if client_id is not None and o.client_id_prefix:
            client_id = f"{o.client_id_prefix}-{client_id}"
        try:
            client = await StompClient.connect(o.host, o.port, client_id=client_id, **o.connect_options())
        except BaseException:
            self._release()
            raise
        self.client = client
        self._errors_seen = 0
        self._disconnecting = False
        client.closed.add_done_callback(self._on_closed)
        self.events.connected(self.name, client, client_id)

    #: action -> the method that performs it
    _HANDLERS: dict[str, Callable[[ReplayClient, Action], Awaitable[None]]] = {
        "connect": _connect,
        "subscribe": _subscribe,
        "send": _send,
        "pace": _pace,
        "unsubscribe": _unsubscribe,
        "disconnect": _disconnect,
    }

    # ---------------------------------------------------------------- ending
    def _on_closed(self, closed: asyncio.Future[StompClientError | None]) -> None:
        """The connection ended; unless the client ended it, that is its error."""
        failure = closed.result()
        self._release()
        if failure is not None and self.client is not None:
            self.events.disconnected(self.name, self.client, "error")
            if not self.failed:
                self.error("connection", failure)
                self._fail()

    def _check_errors(self) -> None:
        """Count ERROR frames that arrived without ending the connection."""
        client = self.client
        if client is not None and len(client.errors) > self._errors_seen:
            for exc in client.errors[self._errors_seen :]:
                self.error("broker", exc)
            self._errors_seen = len(client.errors)

    def error(self, doing: str, exc: BaseException) -> None:
        """Report ``exc`` once, however many waits it failed."""
        if any(seen is exc for seen in self._reported):
            return
        self._reported.append(exc)
        self.events.error(self.name, doing, exc)

    def _fail(self) -> None:
        self.failed = True
        self._stop_consumers()
        if self.client is not None:
            self.client.close()

    def _stop_consumers(self) -> None:
        for consumer in self.consumers.values():
            consumer.stop()
        self.consumers.clear()

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self.events.release_connection()

    async def close(self) -> None:
        """Stop the consumers and DISCONNECT, waiting for the RECEIPT (so the
        broker has read every frame before it)."""
        self._stop_consumers()
        client = self.client
        if client is None or client.is_closed or self._disconnecting:
            return
        self._disconnecting = True
        self._check_errors()
        await client.disconnect(timeout=self.options.timeout)
        self.events.disconnected(self.name, client, "client")
