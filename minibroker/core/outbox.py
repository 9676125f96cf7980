"""The core's side of the edge contract: events in, then a drain of the outbox.

Theory of operation
-------------------
The edge feeds the core events (bytes received, a timer due, an fsync done, a
socket gone ...) and then drains the actions they left (``take_actions``),
carries them out, and says so (``actions_done``). Each event does all its work
before it returns: the frames it handled, and then what those frames leave to
the end of the batch (``Broker._end_event``): blocked producers retried, the
store's deferred dequeues written as one record, RECEIPTs released, and each
connection's output joined into one ``Write``. The drain does nothing but hand
over what is ready, so draining twice with no event between gives nothing the
second time and touches no file.

An event called while another is running (the core reports a failed store to
itself; the virtual network closes a connection while it carries out a
``Close``) does not settle on its own: the outermost one settles once for all.
An edge that feeds several events before it drains (or feeds events while it
carries out actions) opens a ``Turn`` around them, so that their frames share
one settle, as they share one write of the store's deferred dequeues.

This module holds the two pieces that do not need the broker's internals: the
``event`` decorator for an entry point, and the ``Turn``.
"""

from __future__ import annotations

import functools
from types import TracebackType
from typing import Any, Callable, Protocol, TypeVar

from minibroker.core.failstop import fixed_arity

__all__ = ["Settling", "Turn", "event"]


class Settling(Protocol):
    """What ``event`` and ``Turn`` need of the core."""

    #: How many events (or turns) are running now; the outermost settles.
    _depth: int

    def _end_event(self) -> None: ...

    def _end_turn(self) -> None: ...


F = TypeVar("F", bound=Callable[..., Any])


def event(method: F) -> F:
    """Make ``method`` an event entry point: once it (and every event it is inside)
    has returned, the core settles (``Broker._end_event``). A bug that raises skips
    the settle; the edge then reports it (``internal_error``), which settles."""

    arity = fixed_arity(method)
    entry: Callable[..., Any]
    # Of the method's own arity where it has one: no argument packing per event.
    if arity == 1:

        def entry(self: Settling) -> Any:
            self._depth += 1
            try:
                result = method(self)
            finally:
                self._depth -= 1
            if not self._depth:
                self._end_event()
            return result

    elif arity == 2:

        def entry(self: Settling, a: Any) -> Any:
            self._depth += 1
            try:
                result = method(self, a)
            finally:
                self._depth -= 1
            if not self._depth:
                self._end_event()
            return result

    elif arity == 3:

        def entry(self: Settling, a: Any, b: Any) -> Any:
            self._depth += 1
            try:
                result = method(self, a, b)
            finally:
                self._depth -= 1
            if not self._depth:
                self._end_event()
            return result

    else:

        def entry(self: Settling, *args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                result = method(self, *args, **kwargs)
            finally:
                self._depth -= 1
            if not self._depth:
                self._end_event()
            return result

    functools.update_wrapper(entry, method)
    return entry  # type: ignore[return-value]


class Turn:
    """``with broker.turn():`` the events fed inside settle once, at its end, which
    also counts as ``actions_done`` (the edge carried out what it last drained)."""

    __slots__ = ("_core",)

    def __init__(self, core: Settling) -> None:
        self._core = core

    def __enter__(self) -> None:
        self._core._depth += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._core._depth -= 1
        if kind is None:
            self._core._end_turn()
