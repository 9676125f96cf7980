"""Subscriptions: a queue of the messages received for one SUBSCRIBE.

A ``Subscription`` buffers the messages routed to it in a deque and hands
them to ``get()`` callers in order; a caller that finds the deque empty parks
a future that the next MESSAGE completes directly, without passing through
the deque. Errors travel in the same stream, so nothing received before an
ERROR is hidden by it:

- an ERROR frame that no receipt claims is queued behind the messages already
  buffered (or wakes the parked callers at once);
- the end of the subscription (unsubscribe, disconnect, a lost connection)
  is raised by ``get()`` once the buffered messages are drained, and by every
  call after that.

Every buffered message holds a unit of the connection's ``FlowCredit``
(``flow``), shared by all its subscriptions: past ``max_buffered`` units the
client stops reading the socket, so a slow application slows the broker
down through TCP instead of growing memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from .errors import StompClientError, SubscriptionClosed
from .flow import FlowCredit
from .message import Message
from .transport import wait

__all__ = ["Subscription", "Unsubscribe"]

#: Sends a subscription's UNSUBSCRIBE: (subscription, extra headers, receipt, timeout).
Unsubscribe = Callable[["Subscription", Mapping[str, str] | None, bool, float | None], Awaitable[None]]


class Subscription:
    """Messages arriving for one SUBSCRIBE; made by ``StompClient.subscribe``."""

    def __init__(
        self,
        id: str,
        destination: str,
        ack: str,
        *,
        loop: asyncio.AbstractEventLoop,
        credit: FlowCredit,
        unsubscribe: Unsubscribe,
        on_message: Callable[[Message], None] | None = None,
    ) -> None:
        #: The subscription id sent in SUBSCRIBE.
        self.id = id
        self.destination = destination
        #: The ack mode: ``auto``, ``client`` or ``client-individual``.
        self.ack = ack
        #: Messages routed to this subscription so far.
        self.received = 0
        self._loop = loop
        self._credit = credit
        self._send_unsubscribe = unsubscribe
        self._on_message = on_message
        self._items: deque[Message | StompClientError] = deque()
        self._waiters: deque[asyncio.Future[Message]] = deque()
        self._end: StompClientError | None = None

    @property
    def pending(self) -> int:
        """Messages received and not yet taken with ``get``."""
        return sum(1 for item in self._items if isinstance(item, Message))

    @property
    def active(self) -> bool:
        """False once unsubscribed or the connection has ended."""
        return self._end is None

    def get_nowait(self) -> Message | None:
        """The next buffered message, or None when none is buffered.

        Raises what ``get`` would raise once the buffer is drained.
        """
        items = self._items
        if items:
            item = items.popleft()
            if isinstance(item, Message):
                self._credit.give_back()
                return item
            raise item
        if self._end is not None:
            raise self._end
        return None

    async def get(self, timeout: float | None = None) -> Message:
        """The next message, waiting at most ``timeout`` seconds.

        Raises ``TimeoutError`` when none arrives in time, ``StompError`` for
        an ERROR from the broker, ``ConnectionLost`` when the connection died
        and ``SubscriptionClosed`` after ``unsubscribe``/``disconnect``.
        """
        message = self.get_nowait()
        if message is not None:
            return message
        waiter: asyncio.Future[Message] = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            return await wait(waiter, timeout)
        except asyncio.CancelledError:
            # Cancelled after a message was handed over: keep it for the next get().
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._items.appendleft(waiter.result())
                self._credit.retake()
            raise
        finally:
            if waiter in self._waiters:  # timed out or cancelled while parked
                self._waiters.remove(waiter)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.get()
        except SubscriptionClosed:
            raise StopAsyncIteration from None

    async def unsubscribe(
        self,
        headers: Mapping[str, str] | None = None,
        *,
        receipt: bool = True,
        timeout: float | None = 30.0,
    ) -> None:
        """Send UNSUBSCRIBE (with extra ``headers``, e.g. a durable name).

        Messages already buffered can still be taken with ``get``; after them
        ``get`` raises ``SubscriptionClosed``.
        """
        await self._send_unsubscribe(self, headers, receipt, timeout)

    # -- called by the client
    def _deliver(self, message: Message) -> None:
        """Hand ``message`` over: to ``on_message``, a waiting ``get`` or the buffer."""
        self.received += 1
        if self._on_message is not None:
            self._on_message(message)
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(message)
                return
        self._items.append(message)
        self._credit.take()

    def _fail(self, error: StompClientError) -> None:
        """An error that does not end the subscription (yet)."""
        if self._waiters:
            self._wake(error)
        else:
            self._items.append(error)

    def _close(self, reason: StompClientError) -> None:
        """The subscription is over; ``reason`` is raised once drained."""
        if self._end is None:
            self._end = reason
        self._wake(reason)

    def _wake(self, error: StompClientError) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    def __repr__(self) -> str:
        state = "active" if self._end is None else "closed"
        return f"<Subscription {self.id} {self.destination} ack={self.ack} {state}>"
