"""Recovery: what the journals hold, brought back into the destinations at start.

- Queue messages come back store-only: nothing is read until a consumer needs
  it (the store cursor pages them in).
- Durable subscriptions and their messages come back in memory.
- Delivered-but-unacknowledged messages come back flagged redelivered.
- Messages take new broker sequence numbers in journal order (the order they
  were sent in), before any new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from minibroker.core.common import log
from minibroker.core.storehooks import StoreHooks
from minibroker.destinations.destination import Destination
from minibroker.destinations.paged import PagedRef
from minibroker.destinations.queue import Queue
from minibroker.destinations.topic import DurableState, Topic
from minibroker.durability.persistence import StoreRef, durable_key

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext

__all__ = ["recover"]


def recover(
    context: CoreContext,
    hooks: StoreHooks,
    destination: Callable[[str], Destination],
    compile_selector: Callable[[str | None], Any],
    seqs: Iterator[int],
) -> int:
    """Bring back what the context's journals hold through ``hooks``; returns the number of messages.
    ``destination`` finds or makes one by address, ``compile_selector`` compiles
    a durable subscription's selector (frame handling's), ``seqs`` gives the
    messages their sequence numbers (in journal order).

    Queue messages come back store-only (nothing is read until a consumer
    needs it); durable subscriptions and their messages come back in memory.
    Delivered-but-unacknowledged messages come back flagged redelivered.
    """
    if context.trace.enabled:
        context.trace.event("start")  # a trace's backlogs start again here: what recovery brings back
    store = context.store
    if store is None:
        return 0
    states: dict[str, DurableState] = {}
    for d in store.load_durables():
        topic = destination(d["topic"])
        assert isinstance(topic, Topic)
        state = DurableState(d["client_id"], d["name"], d.get("selector"), bool(d.get("no_local")), d.get("owner"))
        state.selector = compile_selector(state.selector_text)
        topic.durables[(state.client_id, state.name)] = state
        states[durable_key(topic.address, state.client_id, state.name)] = state
    count = 0
    orphans = 0
    for key, location, delivered, journal in store.recover():
        ref = StoreRef(journal, location.seq, key)
        # Journal order is the order the messages were sent in: recovered
        # messages take new broker seqs in that order, before any new one.
        seq = next(seqs)
        if key.startswith("durable:"):
            found = states.get(key)
            if found is None:
                store.dequeue(ref)  # its subscription was removed
                orphans += 1
                continue
            topic = context.destinations[key[len("durable:") :].split("|", 1)[0]]
            message = hooks.load_message(topic, PagedRef(ref, seq, 4, delivered, 0))
            found.refs[message.seq] = ref
            if delivered:
                found.redelivered[message.seq] = 1
            topic.hold(message)
            found.pending.append(message)
        else:
            queue = destination(key)
            assert isinstance(queue, Queue)
            priority, expires = 4, 0
            if queue.policy.prioritized_messages:  # the only case where order needs the payload
                _, priority, expires = store.read_meta(ref)
            queue.cursor.add_recovered(ref, seq, priority, delivered, expires)
        count += 1
    for state in states.values():
        state.pending = type(state.pending)(sorted(state.pending, key=lambda m: m.seq))
    if context.trace.enabled:
        for dest in context.destinations.values():
            stored = len(dest.cursor.store_only) if isinstance(dest, Queue) else 0
            if stored:
                context.trace.event("recover", dest=dest.address, count=stored)
    hooks.set_store_usage(store.disk_usage())
    log.info(
        "recovered %d persistent messages (%d durable subscriptions)%s",
        count,
        len(states),
        f"; dropped {orphans} of removed durable subscriptions" if orphans else "",
    )
    return count
