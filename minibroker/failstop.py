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
from typing import Callable, Concatenate, ParamSpec, Protocol, TypeVar

from storage import StoreFailed

__all__ = ["FailStop", "fail_stop", "is_fail_stop"]

P = ParamSpec("P")


class FailStop(Protocol):
    """What ``fail_stop`` needs of the object whose method it wraps."""

    def store_failed(self, error: BaseException) -> None: ...


C = TypeVar("C", bound=FailStop)

#: The attribute that marks a wrapped method (``is_fail_stop``).
_MARK = "__fail_stop__"


def fail_stop(method: Callable[Concatenate[C, P], None]) -> Callable[Concatenate[C, P], None]:
    """Wrap an entry point of the core: a ``StoreFailed`` it raises becomes ``store_failed``."""

    @functools.wraps(method)
    def guarded(self: C, /, *args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except StoreFailed as exc:
            self.store_failed(exc)

    setattr(guarded, _MARK, True)
    return guarded


def is_fail_stop(method: object) -> bool:
    """Is ``method`` wrapped by ``fail_stop``?"""
    return bool(getattr(method, _MARK, False))
