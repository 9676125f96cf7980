"""The one place where a store that failed outside a frame's handler stops the broker.

Theory of operation. The core is driven by its edge (``server.py``, ``sim.py``)
through a handful of entry points (``Broker.receive_data``, ``tick``,
``set_writable``, ``login_checked``, ...). Almost any of them can end up
bringing a message back from disk: a consumer that can take more, a cursor
that waited for memory, a producer let in by flow control, a connection whose
unacknowledged messages go back to their queue. A read that fails there raises
``StoreFailed``. Inside a frame's handler the frame's client gets an ERROR
(``Broker._handle``); anywhere else nothing answers it, and on the real server
the exception would end in an asyncio callback, which only logs it while the
broker goes on: a broken promise. So every entry point the edge calls is
wrapped in ``fail_stop``, which turns a ``StoreFailed`` into the fail-stop
path (``store_failed``: a CRITICAL log, an ERROR for every RECEIPT still
waiting, ``Shutdown``). ``tests/test_core_entry_points.py`` checks that every
method the edges call is wrapped, so a new one cannot be forgotten.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Concatenate, ParamSpec, Protocol, TypeVar

from storage import StoreFailed

__all__ = ["FailStop", "fail_stop", "fail_stop_written_out", "fixed_arity", "is_fail_stop"]

P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., object])


class FailStop(Protocol):
    """What ``fail_stop`` needs of the object whose method it wraps."""

    def store_failed(self, error: BaseException) -> None: ...


C = TypeVar("C", bound=FailStop)

#: The attribute that marks a wrapped method (``is_fail_stop``).
_MARK = "__fail_stop__"


def fail_stop(method: Callable[Concatenate[C, P], None]) -> Callable[Concatenate[C, P], None]:
    """Wrap an entry point of the core: a ``StoreFailed`` it raises becomes ``store_failed``."""

    arity = fixed_arity(method)
    call: Callable[..., None] = method
    guarded: Callable[..., None]
    # Entry points run once per read or turn: a wrapper of the method's own arity
    # passes its arguments on without packing them (*args cost about 3% of an ACK's
    # round in instructions). The edge calls entry points with positional arguments.
    if arity == 1:

        def guarded(self: C) -> None:
            try:
                call(self)
            except StoreFailed as exc:
                self.store_failed(exc)

    elif arity == 2:

        def guarded(self: C, a: object) -> None:
            try:
                call(self, a)
            except StoreFailed as exc:
                self.store_failed(exc)

    elif arity == 3:

        def guarded(self: C, a: object, b: object) -> None:
            try:
                call(self, a, b)
            except StoreFailed as exc:
                self.store_failed(exc)

    else:

        def guarded(self: C, /, *args: P.args, **kwargs: P.kwargs) -> None:
            try:
                method(self, *args, **kwargs)
            except StoreFailed as exc:
                self.store_failed(exc)

    functools.update_wrapper(guarded, method)
    setattr(guarded, _MARK, True)
    return guarded  # type: ignore[return-value]


#: The methods ``fail_stop_written_out`` marked (held here: a compiled method takes no attribute).
_written_out: set[object] = set()


def fail_stop_written_out(method: F) -> F:
    """Mark ``method`` as an entry point that does ``fail_stop``'s work itself: its whole
    body is inside ``try: ... except StoreFailed as exc: self.store_failed(exc)``, written
    out where a wrapper's call per read counts (``Broker.receive_data``)."""
    _written_out.add(method)
    return method


def fixed_arity(method: Callable[..., object]) -> int | None:
    """How many positional parameters ``method`` (under its wrappers) takes, ``self``
    included, when that is all it takes (no defaults, no ``*args``, no keywords only);
    else None."""
    inner = inspect.unwrap(method)
    code = getattr(inner, "__code__", None)
    if code is None or getattr(inner, "__defaults__", None) or code.co_kwonlyargcount:
        return None
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    return int(code.co_argcount)


def is_fail_stop(method: object) -> bool:
    """Is ``method`` wrapped by ``fail_stop``?"""
    return method in _written_out or bool(getattr(method, _MARK, False))
