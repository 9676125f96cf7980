"""The core's entry points: events in, then a drain of the outbox.

How an event runs:

1. The edge calls an entry point (bytes received, a timer due, an fsync done,
   a socket gone ...), wrapped in ``entry_point``.
2. The entry point does its work: the frames it handles, what they leave for
   the end of the batch.
3. The outermost event settles (``Broker._end_event``): blocked producers
   retried, the store's deferred dequeues written as one record, RECEIPTs
   released, each connection's output joined into one ``Write``.
4. The edge drains the outbox (``take_actions``, which only hands over what is
   ready), carries the actions out and says so (``actions_done``).

Preconditions and rules:

- An event called inside another (the core reports a failed store to itself;
  the virtual network closes a connection while it carries out a ``Close``)
  does not settle on its own: the outermost one settles once for all.
- An edge that feeds several events before it drains opens a ``Turn`` around
  them: their frames share one settle, and one write of the deferred dequeues.
- A ``StoreFailed`` raised anywhere in an entry point (a store that fails
  bringing a message back from disk) takes the fail-stop path
  (``store_failed``: a CRITICAL log, an ERROR for every RECEIPT still waiting,
  ``Shutdown``). On the real server it would otherwise end in an asyncio
  callback, which only logs it while the broker goes on: a broken promise.
  ``tests/core/test_core_entry_points.py`` checks that every method the edges call
  is an entry point.

Why the outbox and the measurements behind it: ``docs/design-notes.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar, cast

from minibroker.connection.session import Session
from minibroker.core.actions import Action, Sync, Write, WriteFrames
from minibroker.core.flow import ProducerFlowControl
from minibroker.core.storehooks import StoreHooks
from storage import StoreFailed

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext
    from minibroker.core.handlers import FrameHandlers
    from minibroker.core.routing import Router

__all__ = ["EntryPoints", "Outbox", "Turn", "entry_point", "is_entry_point", "written_out"]

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., object])

#: The qualified names of the entry points (``is_entry_point``): kept here, not as an
#: attribute of each method, for a compiled method takes no attribute.
_ENTRY_POINTS: set[str] = set()


class Turn:
    """How many events (or turns) run now; the outermost settles.

    ``with broker.turn():`` the events fed inside settle once, at its end, which
    also counts as ``actions_done`` (the edge carried out what it last drained)."""

    __slots__ = ("depth", "end_event", "end_turn")

    def __init__(self, end_event: Callable[[], None], end_turn: Callable[[], None]) -> None:
        """``end_event`` settles an event, ``end_turn`` a turn (``Broker._end_event``, ``_end_turn``)."""
        self.depth = 0
        self.end_event = end_event
        self.end_turn = end_turn

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.depth -= 1
        if kind is None:
            self.end_turn()


class EntryPoints(Protocol):
    """What ``entry_point`` needs of the core whose methods it wraps."""

    @property
    def events(self) -> Turn:
        """The events running now."""

    def store_failed(self, error: BaseException) -> None: ...


C = TypeVar("C", bound=EntryPoints)


def entry_point(method: Callable[Concatenate[C, P], R]) -> Callable[Concatenate[C, P], R]:
    """Make ``method`` an entry point of the core: an event that settles once it (and
    every event it is inside) has returned, and whose ``StoreFailed`` stops the
    broker (``store_failed``). A bug that raises skips the settle; the edge then
    reports it (``internal_error``), which settles. Returns what ``method`` returns
    (None if the store failed)."""

    def entry(core: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            events = core.events
            events.depth += 1
            try:
                result = method(core, *args, **kwargs)
            finally:
                events.depth -= 1
            if not events.depth:
                events.end_event()
            return result
        except StoreFailed as exc:
            core.store_failed(exc)
            return cast(R, None)  # the broker is stopping: what the method would return is moot

    functools.update_wrapper(entry, method)
    _ENTRY_POINTS.add(method.__qualname__)
    return entry


def written_out(method: F) -> F:
    """Mark ``method`` as an entry point that does ``entry_point``'s work in its own
    body, written out where a wrapper's call per read counts (``Broker.receive_data``)."""
    _ENTRY_POINTS.add(method.__qualname__)
    return method


def is_entry_point(method: object) -> bool:
    """Is ``method`` an entry point (``entry_point`` or ``written_out``)?"""
    return getattr(method, "__qualname__", None) in _ENTRY_POINTS


class Outbox:
    """The actions ready for the edge, and the settling at each event's end.

    A part the ``Broker`` holds (``broker.outbox``). Its own state: the actions
    ready (``actions``), the events running (``events``), the sessions whose full
    outbox went to the edge (given more once it says it carried it out), and
    whether the last end left work for the next."""

    def __init__(
        self,
        context: CoreContext,
        *,
        storehooks: StoreHooks,
        flow: ProducerFlowControl,
        router: Router,
        handlers: FrameHandlers,
        dirty: list[Session],
        control: list[Action],
        store_failed: Callable[[BaseException], None],
    ) -> None:
        """The sibling parts it settles: ``storehooks`` (the turn's writes, the ``Sync``),
        ``flow`` (parked SENDs let in through ``router``, cursors that waited for
        memory), ``handlers`` (a refilled session's dispatch). ``dirty`` (sessions with
        output not yet here) and ``control`` (closes, pauses and requests of the event
        running) are the broker's lists; ``store_failed`` is the fail-stop path."""
        self.clock = context.clock
        self.store = context.store
        self.storehooks = storehooks
        self.flow = flow
        self._route = router.route
        self._dirty = dirty
        self._control = control
        self._blocked_cursors = flow.blocked_cursors
        self._resume_dispatch = handlers.resume_dispatch
        self.store_failed = store_failed
        #: The actions ready for the edge (``Broker.take_actions`` drains it).
        self.actions: list[Action] = []
        #: Events (or turns) running now: the outermost settles.
        self.events = Turn(self.end_event, self.end_turn)
        #: Sessions whose full outbox went to the edge: given more once it says it carried it out.
        self._freed: list[Session] = []
        #: ... and the edge said so: refilled at the next event's end.
        self._refill: list[Session] = []
        #: The last event's end left work for the next (``done`` does it).
        self.unfinished = False

    @property
    def ready(self) -> bool:
        """Are actions waiting for the edge?"""
        return bool(self.actions)

    def done(self) -> bool:
        """The edge carried out what it drained (``Broker.actions_done``); are actions ready again?"""
        if self._freed or self.unfinished:  # else the last event's end finished everything
            self.end_turn()
        return bool(self.actions)

    def end_turn(self) -> None:
        """The edge's turn is over: what it drained is carried out, the events it fed end."""
        if self._freed:
            self._refill.extend(self._freed)
            self._freed.clear()
        if not self.events.depth:
            self.end_event()

    def end_event(self) -> None:
        """The end of an event (or of a turn): finish what its frames left for the
        end of the batch (``_finish``), and put the actions it leaves in the outbox
        : each session's output as one ``Write``, then a ``Sync``
        if RECEIPTs wait for one, then the closes, pauses and requests. Runs as an
        event itself, so that what it calls (a failed store reported) does not
        settle again inside it.

        Each step runs only when it has work, and most ends have none for most of
        them: a read of ACKs leaves nothing at all; the usual read leaves output and
        nothing for ``_finish`` (nobody waits for space, the store wrote nothing,
        no connection waits for a refill)."""
        store = self.store
        storehooks = self.storehooks
        finish = (
            self.flow.retry
            or self._refill
            or (store is not None and (store.deferred_dequeues or store.write_generation != storehooks.generation_seen))
        )
        if not finish:
            self.unfinished = False  # what ``_finish`` would say
            if not (self._dirty or self._control or storehooks.waiters):
                return
        events = self.events
        events.depth = 1
        try:
            if finish:
                self._finish()
            outbox = self.actions
            dirty = self._dirty
            if dirty:
                now = self.clock.now()
                for session in dirty:  # nothing here writes: emptied in place after (sessions hold its append)
                    if not session.outbox:
                        continue
                    writing = session.writing
                    throttled = not writing.can_write
                    if session.framed:
                        outbox.append(WriteFrames(session.id, session.take_frames()))
                    else:  # ``session.take_output()`` written out: once per write
                        chunks = session.outbox
                        outbox.append(Write(session.id, b"".join(chunks)))
                        chunks.clear()
                        session.out_bytes = 0
                        if writing.outbox_full:
                            writing.outbox_taken()
                    session.last_write = now
                    if not writing.socket_full:
                        session.last_write_progress = now
                    if throttled and writing.can_write and session.is_open:
                        self._freed.append(session)
                dirty.clear()
            if storehooks.waiters and storehooks.sync_due():
                outbox.append(Sync())
            if self._control:
                outbox.extend(self._control)
                self._control.clear()
        finally:
            events.depth = 0

    @entry_point
    def _finish(self) -> None:
        """Producers and cursors that waited for space, the store's deferred writes,
        dispatch to sessions whose outbox the edge carried out: it can bring messages
        back from disk, so a store that fails there stops the broker (``entry_point``)."""
        flow = self.flow
        if flow.retry:
            flow.retry = False
            flow.unblock_producers(self._route, self.storehooks)
            for queue in list(self._blocked_cursors):
                del self._blocked_cursors[queue]
                queue.dispatch()
        self.storehooks.flush()  # (nothing, unless the store wrote or deferred since the last)
        refill = self._refill
        if refill:
            self._refill = []
            for session in refill:
                if session.is_open and session.writing.can_write:
                    self._resume_dispatch(session)
        # What the refill dispatched (an auto-ack dequeue) waits for the next event's end,
        # which actions_done is; and so does what retries the store's flush made possible.
        self.unfinished = True if refill else flow.retry
