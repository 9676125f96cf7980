"""What destinations tell the broker: consumption, expiry, dead letters, page-in.

A mixin of ``Broker``; ``destination.py`` calls these so that queues and
topics need not know about the store, the trace or the dead letter queues.
"""
from __future__ import annotations

from typing import Any

from .codec import encode
from .coreutil import log
from .destination import Destination
from .queue import Queue
from .errors import ResourceLimitError
from .frames import Frame
from .message import Message
from .subscription import Subscription

__all__ = ["DestinationHooks"]


class DestinationHooks:
    """Callbacks from queues and topics."""

    def delivered(self, sub: Subscription, message: Message) -> None:
        """A MESSAGE frame went to ``sub`` (traced: dispatch, and the ack of auto mode)."""
        session = str(sub.session.id)
        redelivered = bool(message.redeliveries or message.seq in sub.redelivered)
        self._emit("dispatch", session=session, sub=sub.id, dest=sub.destination.address, msg=message.message_id,
                   size=message.size, redelivered=redelivered, priority=message.priority)
        if sub.auto and not sub.browser:
            self._emit("ack", session=session, sub=sub.id, dest=sub.destination.address, msg=message.message_id, mode="auto")

    def redelivering(self, destination: Destination, message: Message, sub: Subscription | None) -> None:
        """``message`` goes back to ``destination`` for another delivery (traced)."""
        count = message.redeliveries if sub is None or destination.kind == "queue" else sub.redelivered.get(message.seq, 1)
        self._emit("redeliver", dest=destination.address, msg=message.message_id, redeliveries=count,
                   session=str(sub.session.id) if sub is not None else None, sub=sub.id if sub is not None else None)

    def message_consumed(self, destination: Destination, message: Message) -> None:
        """``message`` left ``destination`` for good (acknowledged or dropped)."""
        destination.release(message)
        if message.store_ref is not None and isinstance(destination, Queue) and self.store is not None:
            self.store.dequeue(message.store_ref, self._txid)
            message.store_ref = None

    def message_enqueued(self, queue: Queue, message: Message, cached: bool) -> None:
        """``message`` entered ``queue``: cached in memory, or store-only."""
        if self.trace.enabled:
            self._emit("enqueue", dest=queue.address, msg=message.message_id, size=message.size, cached=cached,
                       priority=message.priority, persistent=message.persistent,
                       session=str(message.origin) if message.origin else None)

    def page_in_blocked(self, queue: Queue) -> None:
        """``queue``'s cursor refused to page in: remember to try again when space frees."""
        self._blocked_cursors.add(queue)
        if self.trace.enabled:
            self._emit("page_in_blocked", dest=queue.address, pending=len(queue.cursor.store_only),
                       hwm=queue.policy.cursor_memory_high_water_mark, policy=queue.policy.space_check,
                       consumers=len(queue.consumers),
                            dest_mem_pct=queue.memory.percent, mem_pct=self.memory.percent)
        for finding in self.diagnose():
            if finding["destination"] == queue.address:
                log.warning("DIAGNOSIS %s: %s; cure: %s", finding["pathology"], finding["summary"], finding["cure"])

    def paged_in(self, queue: Queue, count: int) -> None:
        if self.trace.enabled:
            self._emit("page_in", dest=queue.address, count=count, dest_mem_pct=queue.memory.percent,
                            mem_pct=self.memory.percent)

    def message_expired(self, destination: Destination, message: Message) -> None:
        """``message`` expired before it could be delivered."""
        if self.trace.enabled:
            self._emit("expire", dest=destination.address, msg=message.message_id)
        if destination.policy.process_expired:
            self.dead_letter(destination, message, "expired")
        else:
            self.message_consumed(destination, message)

    def dead_letter(self, destination: Destination, message: Message, cause: str) -> None:
        """Move ``message`` from ``destination`` to its dead letter queue.

        As ActiveMQ's dead letter strategies: a shared ``ActiveMQ.DLQ`` or an
        individual ``ActiveMQ.DLQ.Queue.<name>``; non-persistent messages are
        dropped unless ``process_non_persistent``; nothing leaves a DLQ for
        another DLQ.
        """
        policy = destination.policy
        self.message_consumed(destination, message)
        if destination.is_dlq or policy.dead_letter_strategy == "discard" or not (message.persistent or policy.process_non_persistent):
            log.info("%s: %s dropped (%s), not dead-lettered", destination.address, message.message_id, cause)
            if self.trace.enabled:
                self._emit("discard", dest=destination.address, msg=message.message_id, reason=cause)
            return
        if policy.dead_letter_strategy == "shared":
            dlq_name = policy.dead_letter_queue
        else:
            dlq_name = f"ActiveMQ.DLQ.{destination.kind.capitalize()}.{destination.name}"
        dlq = self.registry.system_queue(dlq_name)
        assert isinstance(dlq, Queue)
        headers = dict(message.headers)
        headers["destination"] = dlq.address
        headers["original-destination"] = destination.address
        headers["dlqDeliveryFailureCause"] = cause
        copy = Message(
            message.seq, message.message_id, dlq.address, headers, message.body,
            persistent=message.persistent, priority=message.priority, expires=0,
            timestamp=message.timestamp, origin=message.origin,
        )
        log.info("%s: %s dead-lettered to %s (%s)", destination.address, message.message_id, dlq.address, cause)
        if self.trace.enabled:
            self._emit("dlq", dest=destination.address, msg=message.message_id, dlq=dlq.address, reason=cause)
        try:
            self._admit(dlq, copy)
        except ResourceLimitError as exc:
            log.error("%s: could not journal %s in %s: %s", destination.address, message.message_id, dlq.address, exc.message)
            dlq.accept(copy)

    def destination_created(self, destination: Destination) -> None:
        """A destination came into being (on first use)."""
        if self.trace.enabled:
            destination.memory.add_listener(self._trace_usage)
        dlq_names = {p.dead_letter_queue for p in self.config.destination_policy} | {"ActiveMQ.DLQ"}
        destination.is_dlq = destination.kind == "queue" and (
            destination.name in dlq_names or destination.name.startswith("ActiveMQ.DLQ.")
        )
        log.debug("created %s", destination.address)

    def end_of_browse(self, sub: Subscription) -> None:
        """Tell a queue browser that it has seen everything (ActiveMQ's ``browser:end``)."""
        headers = {
            "subscription": sub.id,
            "message-id": f"ID:{self.name}-{self.boot}-browse-{sub.key}",
            "destination": sub.destination.address,
            "browser": "end",
        }
        sub.session.write(encode(Frame("MESSAGE", headers, b""), sub.session.version))

    def max_page_size(self, destination: Destination) -> int:
        """How many undeliverable messages a dispatch pass may step over."""
        return destination.policy.max_page_size

    def diagnose(self) -> list[dict[str, Any]]:
        """Known pathologies visible right now (see ``diagnosis.py``)."""
        from .diagnosis import diagnose

        return diagnose(self)
