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
  ``tests/test_core_entry_points.py`` checks that every method the edges call
  is an entry point.

Why the outbox and the measurements behind it: ``docs/design-notes.md``.
"""

from __future__ import annotations

import functools
from types import TracebackType
from typing import Callable, Concatenate, ParamSpec, Protocol, TypeVar, cast

from storage import StoreFailed

__all__ = ["EntryPoints", "Turn", "entry_point", "is_entry_point", "written_out"]

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., object])

#: The attribute that marks an entry point (``is_entry_point``).
_MARK = "__entry_point__"


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
    setattr(entry, _MARK, True)
    return entry


def written_out(method: F) -> F:
    """Mark ``method`` as an entry point that does ``entry_point``'s work in its own
    body, written out where a wrapper's call per read counts (``Broker.receive_data``)."""
    setattr(method, _MARK, True)
    return method


def is_entry_point(method: object) -> bool:
    """Is ``method`` an entry point (``entry_point`` or ``written_out``)?"""
    return bool(getattr(method, _MARK, False))
