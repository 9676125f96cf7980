"""Pending cursors of topic subscriptions: ``vm`` (memory) and ``file`` (swap to disk).

A topic subscription keeps the messages its consumer has no room for yet in a
pending list, ActiveMQ's ``matched`` cursor. Two kinds, chosen by the
destination policy ``pending_cursor``:

- ``vm`` (``VMPendingMessageCursor``): a deque in memory. It is *full* when
  memory is at 100%: the producer then blocks.
- ``file`` (``FilePendingMessageCursor``), the theory of operation:

  * while nothing is on disk and memory is below the high-water mark (70%),
    a new message goes to the memory list;
  * otherwise the subscription *swaps*: its **whole** memory list goes to the
    temp store in one go (``swap_out``), and the new message is appended to
    disk; while anything is on disk, every new message goes to disk, so
    memory always holds the older messages and order is kept;
  * the broker also swaps every file cursor when memory crosses the mark;
  * it is *full* when memory is at 100%, or when it has messages on disk and
    the temp store is full (``temp_limit``);
  * messages come back from disk one at a time, in order, as the consumer
    takes them (``swap_in``).

  Each swapped message releases its memory; the temp store counts whole
  files, and never deletes its current write file (the temp-storage deadlock: "Observations on
  ActiveMQs temp storage.", 24 Feb 2011).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from minibroker.durability.persistence import decode_messages, decode_meta
from storage import StoreFull

if TYPE_CHECKING:
    from minibroker.destinations.destination import Destination
    from minibroker.destinations.subscription import Subscription
    from minibroker.protocol.message import Message

__all__ = ["FilePending", "vm_is_full"]

log = logging.getLogger("minibroker.pending")


def vm_is_full(topic: Destination) -> bool:
    """A VM cursor is full when its memory (the topic's, so the broker's) is at 100%."""
    return topic.memory.is_full()


class FilePending:
    """The ``file`` pending cursor of one topic subscription (see the module docstring)."""

    def __init__(self, topic: Destination, sub: Subscription) -> None:
        self.topic = topic
        self.sub = sub
        self.memory: deque[Message] = deque()
        #: The temp store seqs of the messages on disk, in order (numbers: a spool may hold millions).
        self.disk: deque[int] = deque()
        self.swaps = 0
        #: A swap found the disk full (logged once until one succeeds).
        self._kept_in_memory = False

    # -- the deque interface the topic uses
    def __len__(self) -> int:
        return len(self.memory) + len(self.disk)

    def __bool__(self) -> bool:
        return bool(self.memory) or bool(self.disk)

    def __iter__(self) -> Iterator[Message]:
        yield from self.memory
        topic = self.topic
        for entry in self.disk:
            yield self._decode(topic.stored.temp_store().read(entry))

    def append(self, message: Message) -> None:
        """A new message (already held for this subscription by the topic)."""
        topic = self.topic
        policy = topic.policy
        if self.disk or not topic.memory.has_space(policy.cursor_memory_high_water_mark, "legacy"):
            if self.memory:
                self.swap_out()
            if not self.memory:  # (a full disk may have kept the list in memory: then the message follows it)
                try:
                    self._to_disk(message)
                    return
                except StoreFull:
                    if self.disk:  # it cannot go ahead of older messages on disk
                        raise
        self.memory.append(message)

    def extendleft(self, messages: Iterable[Message]) -> None:
        """Messages back at the head (NACK): they are older than anything on disk."""
        self.memory.extendleft(messages)

    def popleft(self) -> Message:
        if self.memory:
            return self.memory.popleft()
        message = self._read_back(self.disk.popleft())
        topic = self.topic
        if not self.disk and topic.trace.enabled:
            topic.events.swapped(self.topic, self.sub, "swap_in", self.swaps)
        return message

    def _read_back(self, entry: int) -> Message:
        """A swapped-out message, read from the temp store (which frees it) and held again."""
        topic = self.topic
        store = topic.stored.temp_store()
        message = self._decode(store.read(entry))
        store.release(entry)
        self.topic.hold(message)
        topic.stored.temp_changed()
        return message

    def pop(self) -> Message:
        """The newest pending message (eviction of the newest)."""
        if self.disk:
            return self._read_back(self.disk.pop())
        return self.memory.pop()

    def clear(self) -> None:
        store = self.topic.stored.temp_store() if self.disk else None
        for entry in self.disk:
            assert store is not None
            store.release(entry)
        self.disk.clear()
        self.memory.clear()
        if store is not None:
            self.topic.stored.temp_changed()

    # -- swapping
    def is_full(self) -> bool:
        """ActiveMQ ``FilePendingMessageCursor.isFull``."""
        return self.topic.memory.is_full() or (bool(self.disk) and self.topic.temp_usage.is_full())

    def swap_out(self) -> None:
        """Move the whole memory list to the temp store, in one go."""
        count = len(self.memory)
        if not count:
            return
        topic = self.topic
        store = topic.stored.temp_store()
        written: list[int] = []
        try:
            for message in self.memory:
                written.append(store.append(self._list_id, topic.stored.payload_of(message)))
        except StoreFull as exc:  # a full disk: all of them stay in memory (the order holds), none on disk
            for entry in written:
                store.release(entry)
            topic.stored.temp_changed()
            if not self._kept_in_memory:
                log.warning(
                    "%s: subscription %s: %s; its pending messages stay in memory", self.topic.address, self.sub.id, exc
                )
            self._kept_in_memory = True
            return
        self._kept_in_memory = False
        self.disk.extend(written)
        while self.memory:
            self.topic.release(self.memory.popleft())
        topic.stored.temp_changed()
        self.swaps += 1
        log.info(
            "%s: subscription %s swapped %d pending messages to the temp store (temp usage %d%%, memory %d%%)",
            self.topic.address,
            self.sub.id,
            count,
            topic.temp_usage.percent,
            topic.root_memory.percent,
        )
        if topic.trace.enabled:
            topic.events.swapped(self.topic, self.sub, "swap_out", count)

    @property
    def _list_id(self) -> str:
        """This subscription's list in the temp store."""
        return f"{self.topic.address}|{self.sub.key}"

    def _to_disk(self, message: Message) -> None:
        topic = self.topic
        self.disk.append(topic.stored.temp_store().append(self._list_id, topic.stored.payload_of(message)))
        self.topic.release(message)
        topic.stored.temp_changed()

    def _decode(self, payload: bytes) -> Message:
        """The message a swapped-out payload holds, with its own broker seq."""
        [message] = decode_messages((payload,), (decode_meta(payload)[0],), self.topic.address)
        return message
