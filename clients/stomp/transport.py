"""The socket edge of the client: open a TCP connection, wait with a timeout.

Opening is done by hand (``getaddrinfo`` then ``sock_connect`` per address)
rather than with ``loop.create_connection(host, port)`` for two reasons:

- ``SO_SNDBUF`` / ``SO_RCVBUF`` must be set *before* ``connect()``: the
  receive window's scale is agreed in the SYN, so a buffer shrunk afterwards
  does not shrink what the peer may send. The stalled-consumer lab relies on
  small buffers really being small.
- every failure becomes one ``CannotConnect`` with a short reason
  ("connection refused", "cannot resolve host ..."), where ``create_connection``
  folds several addresses into "Multiple exceptions: ...".
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import CannotConnect

__all__ = ["open_connection", "wait"]

T = TypeVar("T")
P = TypeVar("P", bound=asyncio.BaseProtocol)


def _expire(fut: asyncio.Future[Any], timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"no answer within {timeout:g}s"))


async def wait(fut: asyncio.Future[T], timeout: float | None) -> T:
    """Await ``fut``, failing it with ``TimeoutError`` after ``timeout`` s.

    Cheaper than ``asyncio.wait_for`` (one timer handle, no task) and safe for
    the futures the client hands to exactly one waiter: the timeout is set on
    the future itself, so a result that arrives later finds it done and is
    not lost in between.
    """
    if timeout is None:
        return await fut
    handle = fut.get_loop().call_later(timeout, _expire, fut, timeout)
    try:
        return await fut
    finally:
        handle.cancel()


def _reason(errors: list[OSError]) -> str:
    if errors and all(isinstance(e, ConnectionRefusedError) for e in errors):
        return "connection refused"
    first = errors[0] if errors else OSError("no address to connect to")
    text = first.strerror or str(first)
    return text[:1].lower() + text[1:]


async def _open_socket(
    loop: asyncio.AbstractEventLoop,
    host: str,
    port: int,
    sndbuf: int | None,
    rcvbuf: int | None,
) -> socket.socket:
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise CannotConnect(host, port, f"cannot resolve host {host!r}: {exc.strerror}") from None
    errors: list[OSError] = []
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            if sndbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            if rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise CannotConnect(host, port, _reason(errors))


async def open_connection(
    factory: Callable[[], P],
    host: str,
    port: int,
    *,
    timeout: float | None,
    sndbuf: int | None = None,
    rcvbuf: int | None = None,
) -> tuple[asyncio.Transport, P]:
    """Connect to ``host:port`` and wrap the socket in ``factory()``.

    Raises ``CannotConnect`` on any failure, including ``timeout``.
    """
    loop = asyncio.get_running_loop()

    async def attempt() -> tuple[asyncio.Transport, P]:
        sock = await _open_socket(loop, host, port, sndbuf, rcvbuf)
        try:
            return await loop.create_connection(factory, sock=sock)
        except BaseException:
            sock.close()
            raise

    try:
        return await asyncio.wait_for(attempt(), timeout)
    except TimeoutError:
        raise CannotConnect(host, port, f"timed out after {timeout:g}s") from None
    except OSError as exc:
        raise CannotConnect(host, port, _reason([exc])) from None
