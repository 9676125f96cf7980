"""Transactions: BEGIN, the frames that name it, then COMMIT or ABORT.

A ``Transaction`` only names itself in the frames it sends through its
connection (``StompClient.transaction()`` makes one); the broker does the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from minibroker.frames import Frame

from .message import Message

__all__ = ["Transaction", "TransactionClient"]


class TransactionClient(Protocol):
    """What a transaction asks of its connection (``StompClient`` is one)."""

    @property
    def is_closed(self) -> bool: ...

    async def send(
        self,
        destination: str,
        body: bytes | str = ...,
        headers: Mapping[str, str] | None = ...,
        *,
        receipt: bool = ...,
        transaction: Transaction | str | None = ...,
        timeout: float | None = ...,
    ) -> None: ...

    async def ack(
        self,
        message: Message,
        transaction: Transaction | str | None = ...,
        *,
        receipt: bool = ...,
        timeout: float | None = ...,
    ) -> None: ...

    async def nack(
        self,
        message: Message,
        transaction: Transaction | str | None = ...,
        *,
        receipt: bool = ...,
        timeout: float | None = ...,
    ) -> None: ...

    async def send_frame(self, frame: Frame, *, receipt: bool = ..., timeout: float | None = ...) -> Frame | None: ...


class Transaction:
    """A STOMP transaction, made by ``StompClient.transaction()``.

    As an async context manager it begins on entry and commits on a clean
    exit, aborts on an exception.
    """

    def __init__(self, client: TransactionClient, id: str) -> None:
        self.client = client
        #: The ``transaction`` header value.
        self.id = id
        #: ``new``, ``active``, ``committed`` or ``aborted``.
        self.state = "new"

    async def _control(self, command: str, expected: str, after: str, receipt: bool, timeout: float | None) -> None:
        if self.state != expected:
            raise RuntimeError(f"cannot {command} transaction {self.id!r}: it is {self.state}")
        await self.client.send_frame(Frame(command, {"transaction": self.id}), receipt=receipt, timeout=timeout)
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

    async def __aenter__(self) -> Transaction:
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
