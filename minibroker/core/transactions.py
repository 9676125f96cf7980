"""Transactions: BEGIN, COMMIT, ABORT (a part of frame handling: ``handlers.transactions``).

- BEGIN opens a list of operations on the session; SEND, ACK and NACK inside
  the transaction are added to it instead of being done (``handlers.py``).
- COMMIT does them in order. When any of them touches the journal, every
  record carries one storage txid and takes effect at its TX_COMMIT: all of
  it survives a crash, or none (its RECEIPT waits for the fsync of the
  TX_COMMIT). A SEND refused for lack of room fails the whole COMMIT with an
  ERROR, and the connection stays open.
- ABORT, or the connection's end, rolls back: sends vanish, messages
  acknowledged or rejected become deliverable again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minibroker.connection.session import Session
from minibroker.core.common import DEFERRED, SETTLING_OPS
from minibroker.core.flow import ProducerFlowControl
from minibroker.core.storehooks import StoreHooks
from minibroker.destinations.destination import Destination
from minibroker.destinations.subscription import Subscription
from minibroker.errors import ProtocolError, ResourceLimitError
from minibroker.frames import Frame
from minibroker.protocol.message import Message
from storage import StoreFull

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext

__all__ = ["Transactions"]


class Transactions:
    """BEGIN, COMMIT, ABORT, and the rollback of a transaction left open."""

    def __init__(
        self,
        context: CoreContext,
        storehooks: StoreHooks,
        flow: ProducerFlowControl,
        route: Callable[[Destination, Message], list[Subscription] | None],
        nack: Callable[[Subscription, list[Message], str], None],
    ) -> None:
        """``route`` hands a SEND's message to its destination, ``nack`` rejects
        messages (frame handling's); ``flow`` refuses a COMMIT's failed SEND; the
        context's store is asked whether a COMMIT touches the journal."""
        self.store = context.store
        self.storehooks = storehooks
        self.flow = flow
        self._route = route
        self._nack = nack

    def open(self, session: Session, txid: str) -> list[tuple[str, Any, Any]]:
        """The operations of ``session``'s open transaction ``txid`` (a ``ProtocolError`` if none)."""
        tx: list[tuple[str, Any, Any]] | None = session.transactions.get(txid)
        if tx is None:
            raise ProtocolError(f"unknown transaction {txid!r}: BEGIN it first")
        return tx

    def on_begin(self, session: Session, frame: Frame) -> Any:
        txid = frame.headers.get("transaction")
        if not txid:
            raise ProtocolError("BEGIN frame has no transaction header")
        if txid in session.transactions:
            raise ProtocolError(f"transaction {txid!r} is already in progress")
        session.transactions[txid] = []
        return None

    def on_commit(self, session: Session, frame: Frame) -> Any:
        txid = frame.headers.get("transaction")
        if not txid:
            raise ProtocolError("COMMIT frame has no transaction header")
        ops = self.open(session, txid)
        del session.transactions[txid]
        store = self.store
        durable = store is not None and any(
            (op == "send" and payload.persistent) or (op == "ack" and any(m.store_ref is not None for m in payload))
            for op, _, payload in ops
        )
        if durable:
            # Every journal record of the transaction carries one storage txid
            # and takes effect at its TX_COMMIT: all of it survives a crash, or none.
            self.storehooks.begin_storage_transaction(session)
        try:
            for op, target, payload in ops:
                if op == "send":
                    self._route(target, payload)
                elif op == "ack":
                    target.destination.acknowledge(target, payload)
                else:
                    self._nack(target, payload, op)
            if durable:
                assert self.storehooks.txid is not None
                self.storehooks.commit_storage_transaction(self.storehooks.txid)
        except ResourceLimitError as exc:
            if durable and store is not None and self.storehooks.txid is not None and self.storehooks.failure is None:
                with contextlib.suppress(
                    StoreFull
                ):  # not written: recovery aborts a transaction left without an outcome
                    store.abort(self.storehooks.txid)
            self.storehooks.end_storage_transaction()
            self.flow.refuse_send(session, frame.headers.get("receipt"), f"COMMIT of {txid!r} failed: {exc.message}")
            return DEFERRED
        finally:
            self.storehooks.end_storage_transaction()
        return None  # (its RECEIPT waits for the fsync of its TX_COMMIT: storehooks.receipt)

    def on_abort(self, session: Session, frame: Frame) -> Any:
        txid = frame.headers.get("transaction")
        if not txid:
            raise ProtocolError("ABORT frame has no transaction header")
        ops = self.open(session, txid)
        del session.transactions[txid]
        self.roll_back(ops)
        return None

    def roll_back(self, ops: list[tuple[str, Any, Any]]) -> None:
        """Undo a transaction: sends vanish, acked messages become deliverable again."""
        for op, target, payload in ops:
            if op in SETTLING_OPS:
                target.destination.redeliver(target, payload, "rollback")
