"""The event loop the edge runs on: asyncio's own, or uvloop when it is installed.

The broker is one thread: its event loop reads every socket, runs the core on what
arrived and writes what the core returns, so the loop's own cost per read and per
write is paid on every message. uvloop (libuv under asyncio's API, the ``fast``
extra: ``pip install 'minibroker[fast]'``) does that work in C; the edge uses only
asyncio's protocol API, so it runs unchanged on either.

``auto`` (the default) is uvloop when it can be imported and asyncio otherwise;
``asyncio`` and ``uvloop`` ask for one, and asking for uvloop when it is not
installed is a configuration error that says how to install it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from minibroker.errors import ConfigError

#: The names ``--loop`` and ``transport.event_loop`` accept.
LOOPS = ("auto", "asyncio", "uvloop")

#: Overrides ``transport.event_loop`` (``minibroker serve --loop`` overrides both), also for
#: brokers the labs and the tests start in-process, so that one suite runs on either loop.
LOOP_ENVIRONMENT = "MINIBROKER_LOOP"

T = TypeVar("T")


def uvloop_available() -> bool:
    """Whether uvloop can be imported here."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(name: str) -> str:
    """The loop ``name`` (one of ``LOOPS``) means here: ``"asyncio"`` or ``"uvloop"``."""
    if name not in LOOPS:
        raise ConfigError(f"unknown event loop {name!r}: expected one of " + ", ".join(LOOPS))
    if name == "auto":
        return "uvloop" if uvloop_available() else "asyncio"
    if name == "uvloop" and not uvloop_available():
        raise ConfigError(
            "the uvloop event loop is not installed: pip install 'minibroker[fast]' (or choose --loop asyncio)"
        )
    return name


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new loop of the kind ``name`` resolves to."""
    if resolve(name) == "uvloop":
        import uvloop

        return uvloop.new_event_loop  # type: ignore[no-any-return]
    # asyncio's own loop whatever the process-wide policy says (a policy may be uvloop's).
    return asyncio.DefaultEventLoopPolicy().new_event_loop


def run(main: Coroutine[Any, Any, T], name: str) -> T:
    """``asyncio.run(main)`` on a new loop of the kind ``name`` resolves to."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)


def from_environment(configured: str) -> str:
    """``MINIBROKER_LOOP`` if it is set (and not empty), else ``configured``."""
    return os.environ.get(LOOP_ENVIRONMENT) or configured


def describe(loop: asyncio.AbstractEventLoop) -> str:
    """The running loop, for the start-up log line: ``uvloop 0.21.0`` or ``asyncio (_UnixSelectorEventLoop)``."""
    module = type(loop).__module__.split(".")[0]
    if module == "uvloop":
        # uvloop's own record of its version: importlib.metadata would cost the start a tenth of a second
        from uvloop._version import __version__

        return f"uvloop {__version__}"
    return f"asyncio ({type(loop).__name__})"
