"""What destinations tell the broker: consumption, expiry, dead letters, page-in.

A part the ``Broker`` holds (``broker.hooks``), given the core's context and its
sibling parts when it is made; ``destination.py`` calls these so that queues and
topics need not know about the store, the trace or the dead letter queues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from minibroker.core.common import log
from minibroker.destinations.destination import Destination
from minibroker.destinations.pending import FilePending
from minibroker.destinations.ports import DestinationEvents
from minibroker.destinations.queue import Queue
from minibroker.destinations.subscription import Subscription
from minibroker.destinations.topic import Topic
from minibroker.errors import ProtocolError, ResourceLimitError
from minibroker.frames import Frame
from minibroker.protocol.codec import encode
from minibroker.protocol.headers import header_text
from minibroker.protocol.message import Message, moved_copy

if TYPE_CHECKING:
    from minibroker.connection.session import Session
    from minibroker.core.context import CoreContext
    from minibroker.core.flow import ProducerFlowControl
    from minibroker.core.sampling import Sampling
    from minibroker.core.storehooks import StoreHooks
    from minibroker.destinations.ports import DestinationHandle, DestinationView
    from minibroker.destinations.subscription import SubscribedDestination

__all__ = ["DestinationHooks", "Subscriptions"]


class Subscriptions(Protocol):
    """Frame handling, as the hooks reach the subscriptions it made (``handlers.FrameHandlers``)."""

    @property
    def subs_by_key(self) -> dict[int, Subscription]:
        """The subscriptions by key (ack ids name them)."""

    @property
    def full_logged(self) -> dict[int, float]:
        """Subscription key -> when its "cursor is full" line was last logged."""

    def remove_subscription(self, session: Session, sub: Subscription) -> None:
        """Remove one subscription (its destination takes back what it held)."""


class DestinationHooks(DestinationEvents):
    """Callbacks from queues and topics: a part the broker holds (``broker.hooks``).
    Destinations call it as their ``ports.DestinationEvents``."""

    def __init__(
        self,
        context: CoreContext,
        *,
        storehooks: StoreHooks,
        flow: ProducerFlowControl,
        subscriptions: Subscriptions,
        sampling: Sampling,
        diagnose: Callable[[], list[dict[str, Any]]],
        fail: Callable[[Session, ProtocolError, Frame | None], None],
    ) -> None:
        """The sibling parts it calls: ``storehooks`` (dead letters are admitted through
        them), ``flow`` (the cursors that wait for memory), ``subscriptions`` (frame
        handling's), ``sampling`` (a destination's memory traced); ``diagnose`` names the
        pathologies visible now (``diagnosis.py``) and ``fail`` answers a protocol error
        and closes (the broker's)."""
        self.context = context
        self._subscriptions = subscriptions
        self._diagnose = diagnose
        self._fail = fail
        self._blocked_cursors = flow.blocked_cursors
        self._trace_usage = sampling.usage_changed
        # Bound once: destinations call these hooks for every message.
        self.storehooks = storehooks
        self.admit = storehooks.admit
        self.trace = context.trace
        self._emit = context.trace.event
        self.store = context.store
        self.session_tag = context.session_tag
        #: destinations with an abort-slow-consumer check scheduled.
        self._slow_checks: set[str] = set()

    def delivered(self, sub: Subscription, message: Message) -> None:
        """A MESSAGE frame went to ``sub`` (traced: dispatch, and the ack of auto mode)."""
        self.trace.dispatched(
            sub.trace_ids,
            message.message_id,
            message.size,
            bool(message.redeliveries or message.seq in sub.redelivered),
            message.priority,
            sub.auto and not sub.browser,
        )

    def redelivering(
        self, destination: DestinationHandle, message: Message, sub: Subscription | None, reason: str
    ) -> None:
        """``message`` goes back to ``destination`` for another delivery (traced); ``reason``:
        "nack" or "rollback" (its consumer refused it), "closed" (its consumer went away)."""
        count = (
            message.redeliveries if sub is None or destination.kind == "queue" else sub.redelivered.get(message.seq, 1)
        )
        self._emit(
            "redeliver",
            dest=destination.address,
            msg=message.message_id,
            redeliveries=count,
            reason=reason,
            session=sub.session.tag if sub is not None else None,
            sub=sub.id if sub is not None else None,
        )

    def message_consumed(self, destination: DestinationHandle, message: Message) -> None:
        """``message`` left ``destination`` for good (acknowledged or dropped)."""
        destination.release(message)
        if message.store_ref is not None and isinstance(destination, Queue) and self.store is not None:
            self.store.dequeue(message.store_ref, self.storehooks.txid)
            message.store_ref = None

    def message_enqueued(self, queue: DestinationView, message: Message, cached: bool) -> None:
        """``message`` entered ``queue``: cached in memory, or store-only."""
        if self.trace.enabled:
            self.trace.enqueued(
                queue.address,
                message.message_id,
                message.size,
                cached,
                message.priority,
                message.persistent,
                message.origin,
                self.session_tag,
            )

    def page_in_blocked(self, queue: DestinationView) -> None:
        """``queue``'s cursor refused to page in: remember to try again when space frees."""
        assert isinstance(queue, Queue)  # only a queue has a store cursor
        self._blocked_cursors[queue] = None
        if self.trace.enabled:
            self._emit(
                "page_in_blocked",
                dest=queue.address,
                pending=len(queue.cursor.store_only),
                hwm=queue.policy.cursor_memory_high_water_mark,
                policy=queue.policy.space_check,
                consumers=len(queue.consumers),
                dest_mem_pct=queue.memory.percent,
                mem_pct=self.context.memory.percent,
            )
        for finding in self._diagnose():
            if finding["destination"] == queue.address:
                log.warning("DIAGNOSIS %s: %s; cure: %s", finding["pathology"], finding["summary"], finding["cure"])

    def forget_destination(self, destination: Destination) -> None:
        """``destination`` is deleted: the registry and the page-in retries forget it."""
        self.context.registry.remove(destination)
        if isinstance(destination, Queue):
            self._blocked_cursors.pop(destination, None)

    def paged_in(self, queue: DestinationView, count: int) -> None:
        if self.trace.enabled:
            self._emit(
                "page_in",
                dest=queue.address,
                count=count,
                dest_mem_pct=queue.memory.percent,
                mem_pct=self.context.memory.percent,
            )

    def message_expired(self, destination: DestinationHandle, message: Message) -> None:
        """``message`` expired before it could be delivered."""
        if self.trace.enabled:
            self._emit("expire", dest=destination.address, msg=message.message_id)
        if destination.policy.process_expired:
            self.dead_letter(destination, message, "expired")
        else:
            self.message_consumed(destination, message)

    def dead_letter(self, destination: DestinationHandle, message: Message, cause: str) -> None:
        """Move ``message`` from ``destination`` to its dead letter queue.

        As ActiveMQ's dead letter strategies: a shared ``ActiveMQ.DLQ`` or an
        individual ``ActiveMQ.DLQ.Queue.<name>``; non-persistent messages are
        dropped unless ``process_non_persistent``; nothing leaves a DLQ for
        another DLQ.
        """
        policy = destination.policy
        self.message_consumed(destination, message)
        if (
            destination.is_dlq
            or policy.dead_letter_strategy == "discard"
            or not (message.persistent or policy.process_non_persistent)
        ):
            log.info("%s: %s dropped (%s), not dead-lettered", destination.address, message.message_id, cause)
            if self.trace.enabled:
                self._emit("discard", dest=destination.address, msg=message.message_id, reason=cause)
            return
        if policy.dead_letter_strategy == "shared":
            dlq_name = policy.dead_letter_queue
        else:
            dlq_name = f"ActiveMQ.DLQ.{destination.kind.capitalize()}.{destination.name}"
        dlq = self.context.registry.system_queue(dlq_name)
        assert isinstance(dlq, Queue)
        copy = moved_copy(
            message,
            dlq.address,
            {"original-destination": destination.address, "dlqDeliveryFailureCause": cause},
            expires=0,
        )
        log.info("%s: %s dead-lettered to %s (%s)", destination.address, message.message_id, dlq.address, cause)
        if self.trace.enabled:
            self._emit("dlq", dest=destination.address, msg=message.message_id, dlq=dlq.address, reason=cause)
        try:
            self.admit(dlq, copy)
        except ResourceLimitError as exc:
            log.error(
                "%s: could not journal %s in %s: %s", destination.address, message.message_id, dlq.address, exc.message
            )
            dlq.accept(copy)

    def destination_created(self, destination: DestinationHandle) -> None:
        """A destination came into being (on first use)."""
        if self.trace.enabled:
            destination.memory.add_listener(self._trace_usage)
        dlq_names = {p.dead_letter_queue for p in self.context.config.destination_policy} | {"ActiveMQ.DLQ"}
        destination.is_dlq = destination.kind == "queue" and (
            destination.name in dlq_names or destination.name.startswith("ActiveMQ.DLQ.")
        )
        log.debug("created %s", destination.address)

    def end_of_browse(self, sub: Subscription) -> None:
        """Tell a queue browser that it has seen everything (ActiveMQ's ``browser:end``)."""
        headers = {
            "subscription": sub.id,
            "message-id": f"ID:{self.context.name}-{self.context.boot}-browse-{sub.key}",
            "destination": sub.destination.address,
            "browser": "end",
        }
        sub.session.write(encode(Frame("MESSAGE", headers, b""), sub.session.version))

    def max_page_size(self, destination: DestinationView) -> int:
        """How many undeliverable messages a dispatch pass may step over."""
        return destination.policy.max_page_size

    # -- topics: full subscriptions, slow consumers, discards, swapping
    def subscription_full(self, topic: DestinationView, sub: Subscription) -> None:
        """``sub``'s pending cursor is full: the producer blocks (logged as ActiveMQ does)."""
        now = self.context.clock.now()
        last = self._subscriptions.full_logged.get(sub.key)
        if last is None or now - last >= topic.policy.blocked_producer_warning_interval / 1000:
            self._subscriptions.full_logged[sub.key] = now
            cursor = "FilePendingMessageCursor" if isinstance(sub.pending, FilePending) else "VMPendingMessageCursor"
            log.info(
                "TopicSubscription: consumer=%s/%s, destinations=1, dispatched=%d, delivered=%d, matched=%d, discarded=%d: "
                "Pending message cursor [%s] is full, temp usage (%d%%) or memory usage (%d%%) limit reached, "
                "blocking message add() pending the release of resources.",
                sub.session.id,
                sub.id,
                len(sub.dispatched),
                sub.delivered_count,
                len(sub.pending),
                sub.discarded,
                cursor,
                self.context.temp_usage.percent,
                self.context.memory.percent,
            )

    def slow_consumer(self, sub: Subscription, slow: bool) -> None:
        """Mark ``sub`` slow (more than its prefetch pending) or no longer slow."""
        sub.slow = slow
        sub.slow_checks = 0
        dest = sub.destination
        if slow:
            log.warning(
                "%s: subscription %s of connection %d has more than its prefetch (%d) pending without an ack; "
                "it appears to be slow",
                dest.address,
                sub.id,
                sub.session.id,
                sub.prefetch,
            )
            if dest.policy.abort_slow_consumer:
                self._schedule_slow_check(dest)
        else:
            log.info(
                "%s: subscription %s of connection %d caught up; no longer slow", dest.address, sub.id, sub.session.id
            )
        if self.trace.enabled:
            self._emit(
                "slow_consumer",
                session=sub.session.tag,
                sub=sub.id,
                dest=dest.address,
                slow=slow,
                pending=len(sub.pending),
                prefetch=sub.prefetch,
            )

    def _schedule_slow_check(self, dest: SubscribedDestination) -> None:
        if dest.address in self._slow_checks:
            return
        self._slow_checks.add(dest.address)
        period = dest.policy.abort_slow_consumer_check_period / 1000
        self.context.timers.call_at(self.context.clock.now() + period, self._check_slow, dest)

    def _check_slow(self, dest: SubscribedDestination) -> None:
        """ActiveMQ's AbortSlowConsumerStrategy: abort subscriptions slow too often or too long."""
        self._slow_checks.discard(dest.address)
        policy = dest.policy
        period = policy.abort_slow_consumer_check_period
        any_slow = False
        for sub in list(dest.subscriptions):
            if not sub.slow:
                continue
            sub.slow_checks += 1
            too_often = policy.max_slow_count > 0 and sub.slow_checks >= policy.max_slow_count
            too_long = policy.max_slow_duration > 0 and sub.slow_checks * period >= policy.max_slow_duration
            if too_often or too_long:
                self._abort_slow(sub)
            else:
                any_slow = True
        if any_slow and self.context.destinations.get(dest.address) is dest:
            self._schedule_slow_check(dest)

    def _abort_slow(self, sub: Subscription) -> None:
        policy = sub.destination.policy
        session = cast("Session", sub.session)  # every subscription the broker makes is given its Session
        text = (
            f"Consumer was slow too often (>{policy.max_slow_count}) or too long (>{policy.max_slow_duration} ms): "
            f"subscription {sub.id} to {sub.destination.address} aborted ({len(sub.pending)} messages pending)"
        )
        log.warning("connection %d: %s", session.id, text)
        if self.trace.enabled:
            self._emit("unsubscribe", session=session.tag, sub=sub.id, dest=sub.destination.address, reason="abort")
        if policy.abort_connection:
            self._fail(session, ProtocolError(text), None)
            return
        # Better than ActiveMQ, which goes silent: tell the client which subscription and why.
        session.write(
            encode(
                Frame("ERROR", {"message": header_text(text), "subscription": header_text(sub.id)}, b""),
                session.version,
            )
        )
        session.aborted[sub.key] = sub.id  # its late ACKs and NACKs are ignored, not errors
        self._subscriptions.remove_subscription(session, sub)

    def live_subscription(self, sub: Subscription) -> bool:
        """Is ``sub`` still subscribed (not unsubscribed, aborted or closed)?"""
        return self._subscriptions.subs_by_key.get(sub.key) is sub

    def discarded(self, topic: DestinationView, sub: Subscription, message: Message, reason: str) -> None:
        if self.trace.enabled:
            self._emit(
                "discard",
                dest=topic.address,
                msg=message.message_id,
                reason=reason,
                session=sub.session.tag,
                sub=sub.id,
            )

    def swapped(self, topic: DestinationView, sub: Subscription, event: str, count: int) -> None:
        fields: dict[str, Any] = {
            "dest": topic.address,
            "sub": sub.id,
            "count": count,
            "temp_pct": self.context.temp_usage.percent,
            "session": str(sub.session.id),
        }
        if event == "swap_out":
            fields["mem_pct"] = self.context.memory.percent
        self._emit(event, **fields)

    def swap_file_cursors(self, usage: Any, old: int, new: int) -> None:
        """Memory crossed a high-water mark upward: every file cursor under it swaps."""
        if new <= old:
            return
        for dest in self.context.destinations.values():
            if (
                isinstance(dest, Topic)
                and dest.policy.pending_cursor == "file"
                and old < dest.policy.cursor_memory_high_water_mark <= new
            ):
                for sub in dest.subs:
                    if isinstance(sub.pending, FilePending):
                        sub.pending.swap_out()
