"""Requests to the broker's tools: the statistics plugin and the admin operations.

A SEND to ``/queue/ActiveMQ.Statistics.*`` or ``/queue/ActiveMQ.Admin.*`` is not a
message: frame handling hands it here (``FrameHandlers.tools``).

- statistics: the rights are checked, the replies come from the broker's
  ``statistics_source`` and go, one JSON message each, to ``reply-to``;
- admin: the operation is carried out (``ops/admin.py``), then one JSON reply
  goes to ``reply-to`` if given; a refused operation is a ``Refused`` (an ERROR
  that is not the client's fault);
- a temporary queue named as ``reply-to`` is the tool's own: the statistics
  neither list nor count it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from minibroker.connection.session import Session
from minibroker.core.common import DEFERRED
from minibroker.errors import ProtocolError, Refused
from minibroker.frames import Frame
from minibroker.ops.admin import perform
from minibroker.ops.stats import Scope
from minibroker.protocol.message import Message

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext
    from minibroker.ops.admin import AdminHost
    from minibroker.ops.stats import BrokerView, StatisticsSource

__all__ = ["ToolHost", "ToolRequests"]


class ToolHost(Protocol):
    """The broker, as its tools' requests reach it (``Broker``; checked as a
    ``BrokerView`` and an ``AdminHost`` in ``broker.py``)."""

    @property
    def statistics_source(self) -> StatisticsSource:
        """What answers statistics requests (it may be replaced after the broker is made)."""


class ToolRequests:
    """Answer statistics and admin requests."""

    def __init__(
        self,
        context: CoreContext,
        host: ToolHost,
        make_message: Callable[[Session, Frame, str], Message],
    ) -> None:
        """``host`` is the broker as the statistics and the operations read it;
        ``make_message`` makes a reply as a SEND's message (frame handling's)."""
        self.host = host
        self.registry = context.registry
        self.security = context.security
        self._make_message = make_message

    def answer_statistics(self, session: Session, frame: Frame, address: str) -> Any:
        """A request to the statistics plugin: one JSON reply per item to ``reply-to``."""
        reply_to = frame.headers.get("reply-to")
        if not reply_to:
            raise ProtocolError(f"a statistics request to {address} needs a reply-to header")
        self.security.check(session.principal, "write", "queue", address[len("/queue/") :])
        self._mark_tool_reply(session, reply_to)
        broker = cast("BrokerView", self.host)  # the Broker (broker.py checks it is one)
        replies = self.host.statistics_source(broker, address, Scope.of(broker, session, address))
        if replies is None:
            raise ProtocolError(
                f"unknown statistics destination {address}: use ActiveMQ.Statistics.Broker, "
                "ActiveMQ.Statistics.Destination.<name>, ActiveMQ.Statistics.Subscription or ActiveMQ.Statistics.Connection"
            )
        self._reply(session, frame, reply_to, replies)
        return None

    def answer_admin(self, session: Session, frame: Frame, address: str) -> Any:
        """A request to an admin operation (``admin.py``): done, then one JSON reply
        to ``reply-to`` if given (the RECEIPT waits for the disk if the journal was written)."""
        reply_to = frame.headers.get("reply-to")
        if reply_to:
            self.registry.resolve(session, reply_to, "write")  # refused before anything is done
            self._mark_tool_reply(session, reply_to)
        try:
            result = perform(cast("AdminHost", self.host), session, address, frame.headers)  # as above
        except Refused:
            raise
        except ProtocolError as exc:  # understood and declined: a refusal, not a broken client
            raise Refused(exc.message, detail=exc.detail, code=exc.code, client_id=exc.client_id) from exc
        if reply_to:
            self._reply(session, frame, reply_to, [result.answer], indexed=False)
        if result.then is not None:
            result.then()
        if not session.is_open:
            return DEFERRED
        return None  # (its RECEIPT waits for the fsync of a move's or a purge's records: storehooks.receipt)

    def _mark_tool_reply(self, session: Session, reply_to: str) -> None:
        """A temporary queue named as a statistics or admin request's reply-to is the
        asking tool's own: the statistics no longer list or count it (``stats.py``)."""
        target = self.registry.resolve(session, reply_to, "write")
        if target.owner is not None:
            target.tool_reply = True

    def _reply(
        self, session: Session, frame: Frame, reply_to: str, items: list[dict[str, Any]], *, indexed: bool = True
    ) -> None:
        """Send ``items`` as JSON messages to ``reply-to`` (with ``statistics-index`` and
        ``-total`` when ``indexed``; an empty list is one ``{}`` with index -1)."""
        target = self.registry.resolve(session, reply_to, "write")
        correlation = frame.headers.get("correlation-id")
        for i, item in enumerate(items or [{}]):
            headers = {"content-type": "application/json"}
            if indexed:
                headers["statistics-index"] = str(i if items else -1)
                headers["statistics-total"] = str(len(items))
            if correlation is not None:
                headers["correlation-id"] = correlation
            body = json.dumps(item, sort_keys=True).encode("utf-8")
            target.accept(self._make_message(session, Frame("SEND", headers, body), target.address))
