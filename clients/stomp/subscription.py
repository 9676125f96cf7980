"""Subscriptions (a queue of received messages) and transactions.

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

The client counts buffered messages across all subscriptions and stops
reading the socket past ``max_buffered`` (see ``StompClient``), so a slow
application slows the broker down through TCP instead of growing memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, AsyncIterator, Callable, Mapping

from .errors import StompClientError, SubscriptionClosed
from .message import Message
from .transport import wait

if TYPE_CHECKING:
    from .client import StompClient

__all__ = ["Subscription", "Transaction"]


class Subscription:
    """Messages arriving for one SUBSCRIBE; made by ``StompClient.subscribe``."""

    def __init__(
        self,
        client: "StompClient",
        id: str,
        destination: str,
        ack: str,
        on_message: Callable[[Message], None] | None = None,
    ) -> None:
        self.client = client
        #: The subscription id sent in SUBSCRIBE.
        self.id = id
        self.destination = destination
        #: The ack mode: ``auto``, ``client`` or ``client-individual``.
        self.ack = ack
        #: Messages routed to this subscription so far.
        self.received = 0
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
                self.client._consumed()
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
        waiter: asyncio.Future[Message] = self.client._loop.create_future()
        self._waiters.append(waiter)
        try:
            return await wait(waiter, timeout)
        except asyncio.CancelledError:
            # Cancelled after a message was handed over: keep it for the next get().
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._items.appendleft(waiter.result())
                self.client._buffered += 1
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
        await self.client._unsubscribe(self, headers, receipt=receipt, timeout=timeout)

    # -- called by the client
    def _deliver(self, message: Message) -> bool:
        """Hand ``message`` over; True when it was buffered (not taken)."""
        self.received += 1
        if self._on_message is not None:
            self._on_message(message)
            return False
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(message)
                return False
        self._items.append(message)
        return True

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


class Transaction:
    """A STOMP transaction: BEGIN, frames that name it, then COMMIT or ABORT.

    Made by ``StompClient.transaction()``; as an async context manager it
    begins on entry and commits on a clean exit, aborts on an exception.
    """

    def __init__(self, client: "StompClient", id: str) -> None:
        self.client = client
        #: The ``transaction`` header value.
        self.id = id
        #: ``new``, ``active``, ``committed`` or ``aborted``.
        self.state = "new"

    async def _control(self, command: str, expected: str, after: str, receipt: bool, timeout: float | None) -> None:
        if self.state != expected:
            raise RuntimeError(f"cannot {command} transaction {self.id!r}: it is {self.state}")
        await self.client._request(command, {"transaction": self.id}, receipt=receipt, timeout=timeout)
        self.state = after

    async def begin(self, *, receipt: bool = False, timeout: float | None = 30.0) -> None:
        """Send BEGIN."""
        await self._control("BEGIN", "new", "active", receipt, timeout)

    async def commit(self, *, receipt: bool = True, timeout: float | None = 30.0) -> None:
        """Send COMMIT; with ``receipt`` (the default) wait until it is done."""
        await self._control("COMMIT", "active", "committed", receipt, timeout)

    async def abort(self, *, receipt: bool = True, timeout: float | None = 30.0) -> None:
        """Send ABORT; with ``receipt`` (the default) wait until it is done."""
        await self._control("ABORT", "active", "aborted", receipt, timeout)

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        headers: Mapping[str, str] | None = None,
        *,
        receipt: bool = False,
        timeout: float | None = 30.0,
    ) -> None:
        """``client.send`` inside this transaction."""
        await self.client.send(destination, body, headers, receipt=receipt, transaction=self.id, timeout=timeout)

    async def ack(self, message: Message, *, receipt: bool = False, timeout: float | None = 30.0) -> None:
        """``client.ack`` inside this transaction."""
        await self.client.ack(message, self.id, receipt=receipt, timeout=timeout)

    async def nack(self, message: Message, *, receipt: bool = False, timeout: float | None = 30.0) -> None:
        """``client.nack`` inside this transaction."""
        await self.client.nack(message, self.id, receipt=receipt, timeout=timeout)

    async def __aenter__(self) -> "Transaction":
        await self.begin()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if self.state != "active":
            return
        if exc_type is None:
            await self.commit()
        elif not self.client.is_closed:
            await self.abort()

    def __repr__(self) -> str:
        return f"<Transaction {self.id} {self.state}>"
