"""What the client subcommands share: connection options, parsing of
``--header K:V`` and numbers, and turning client failures into one line.

Where the broker is (``broker_address``), first found wins: ``--url
stomp://HOST:PORT`` or ``ws://HOST:PORT[/PATH]`` (or ``--host``/``--port``),
then ``$MINIBROKER_URL``, then the ``[transport]`` of ``--config FILE``
(its port, and its host unless it listens on every address), then
127.0.0.1:61613.

A subcommand that talks to a broker does::

    add_connection_args(parser)
    ...
    def func(args):
        return run(main(args))          # main() uses ``async with connected(args)``

Every failure a user can act on leaves as ``CommandError``, which
``clients.cli.main`` prints as ``minibroker <cmd>: <text>``: status 2 for a
bad argument, 1 for a broker that refused or could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from minibroker.config import load_config
from minibroker.errors import ConfigError
from minibroker.frames import VERSIONS

from ..cli import CommandError
from ..stomp import CannotConnect, ConnectionLost, StompClient, StompClientError, StompError
from ..stomp.client import DEFAULT_PORT, DEFAULT_WEBSOCKET_PORT

__all__ = [
    "destination_command",
    "add_header_arg",
    "add_connection_args",
    "BrokerAddress",
    "broker_address",
    "URL_ENV",
    "open_client",
    "connected",
    "parse_headers",
    "parse_int",
    "describe",
    "run",
    "USAGE",
    "FAILURE",
]

#: Exit status for a bad argument (as argparse uses).
USAGE = 2
#: Exit status for a broker that refused, vanished or could not be reached.
FAILURE = 1


def destination_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, doc: str | None
) -> argparse.ArgumentParser:
    """A subcommand parser whose first argument is DEST; its description is
    ``doc`` (the module docstring) without the summary line."""
    description = doc.split("\n\n", 1)[-1].replace("``", "") if doc else None
    parser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("destination", metavar="DEST", help="e.g. /queue/a or /topic/t")
    return parser


def add_header_arg(parser: argparse.ArgumentParser, frame: str) -> None:
    """Add a repeatable ``--header K:V`` for ``frame`` (see ``parse_headers``)."""
    parser.add_argument(
        "--header",
        "-H",
        action="append",
        default=[],
        metavar="K:V",
        help=f"add header K with value V to {frame} (repeatable)",
    )


#: The environment variable that names the broker for every client command.
URL_ENV = "MINIBROKER_URL"
#: The URL schemes a broker may be named by: STOMP over TCP, STOMP over WebSocket.
SCHEMES = ("stomp", "ws")
_DEFAULT_HOST = "127.0.0.1"
_ANY_ADDRESS = ("", "0.0.0.0", "::")


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--url --config --host --port --login --passcode --client-id --vhost
    --version --heartbeat --connect-timeout`` to ``parser``."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--url",
        metavar="URL",
        help=f"the broker: stomp://HOST:PORT or ws://HOST:PORT[/PATH] (default: ${URL_ENV}, "
        f"else the port of --config, else stomp://{_DEFAULT_HOST}:{DEFAULT_PORT})",
    )
    group.add_argument("--config", metavar="FILE", help="a broker's TOML configuration: connect to its port")
    group.add_argument("--host", help=f"broker host (default: {_DEFAULT_HOST})")
    group.add_argument("--port", help=f"broker STOMP port (default: {DEFAULT_PORT})")
    group.add_argument("--login", help="login header of CONNECT")
    group.add_argument("--passcode", help="passcode header of CONNECT")
    group.add_argument("--client-id", help="client-id header of CONNECT (ActiveMQ's JMS client id)")
    group.add_argument("--vhost", default="localhost", help="host header of CONNECT (default: %(default)s)")
    group.add_argument(
        "--version",
        dest="stomp_version",
        choices=VERSIONS,
        help="speak only this STOMP version (default: offer 1.0,1.1,1.2)",
    )
    group.add_argument(
        "--heartbeat",
        default="0,0",
        metavar="CX,CY",
        help="heart-beat offer in ms: send every CX, expect every CY (default: %(default)s)",
    )
    group.add_argument(
        "--connect-timeout", default="10", metavar="S", help="seconds to wait for CONNECTED (default: %(default)s)"
    )


def parse_int(value: object, option: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int in range, or a ``CommandError`` naming ``option``."""
    try:
        number = int(str(value))
    except ValueError:
        number = None
    if number is None or (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        if minimum is not None and maximum is not None:
            wanted = f"an integer from {minimum} to {maximum}"
        elif minimum is not None:
            wanted = f"an integer >= {minimum}"
        else:
            wanted = "an integer"
        raise CommandError(f"bad {option} {value!r}: expected {wanted}", USAGE)
    return number


def parse_float(value: object, option: str) -> float:
    """``value`` as a positive number of seconds, or a ``CommandError``."""
    try:
        number = float(str(value))
    except ValueError:
        number = -1.0
    if not number > 0:
        raise CommandError(f"bad {option} {value!r}: expected a positive number of seconds", USAGE)
    return number


def parse_headers(values: Sequence[str] | None, option: str = "--header") -> dict[str, str]:
    """``["K:V", ...]`` as a dict; the value may contain colons, the name may not be empty."""
    headers: dict[str, str] = {}
    for item in values or ():
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            raise CommandError(f"bad {option} {item!r}: expected NAME:VALUE", USAGE)
        headers[name.strip()] = value
    return headers


def _parse_heartbeat(value: str) -> tuple[int, int]:
    parts = value.split(",")
    if len(parts) != 2:
        raise CommandError(f"bad --heartbeat {value!r}: expected CX,CY in milliseconds", USAGE)
    cx, cy = (parse_int(p.strip(), "--heartbeat", 0) for p in parts)
    return cx, cy


@dataclass(frozen=True)
class BrokerAddress:
    """Where a client command connects: STOMP over TCP, or over WebSocket at ``path``."""

    host: str
    port: int
    scheme: str = "stomp"
    path: str = "/"

    def __str__(self) -> str:
        path = self.path if self.scheme == "ws" else ""
        return f"{self.scheme}://{self.host}:{self.port}{path}"


def parse_url(text: str, source: str) -> BrokerAddress:
    """``stomp://HOST:PORT`` or ``ws://HOST:PORT[/PATH]`` as a ``BrokerAddress``;
    a ``CommandError`` naming ``source`` (``--url``, ``$MINIBROKER_URL``) otherwise."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise CommandError(f"bad {source} {text!r}: {exc}", USAGE) from None
    if parts.scheme not in SCHEMES or not parts.hostname or parts.query or parts.fragment:
        raise CommandError(f"bad {source} {text!r}: expected stomp://HOST:PORT or ws://HOST:PORT[/PATH]", USAGE)
    if parts.scheme == "stomp" and parts.path not in ("", "/"):
        raise CommandError(f"bad {source} {text!r}: a stomp:// URL has no path", USAGE)
    default = DEFAULT_PORT if parts.scheme == "stomp" else DEFAULT_WEBSOCKET_PORT
    return BrokerAddress(parts.hostname, port or default, parts.scheme, parts.path or "/")


def broker_address(args: argparse.Namespace) -> BrokerAddress:
    """Where the broker is: ``--url`` or ``--host``/``--port``, else ``$MINIBROKER_URL``,
    else ``--config FILE``'s transport, else 127.0.0.1:61613 (see the module's docstring)."""
    url, host, port = getattr(args, "url", None), args.host, args.port
    if url is not None and (host is not None or port is not None):
        raise CommandError("give the broker as --url or as --host/--port, not both", USAGE)
    if url is not None:
        return parse_url(url, "--url")
    if host is None and port is None and os.environ.get(URL_ENV):
        return parse_url(os.environ[URL_ENV], f"${URL_ENV}")
    config_file = getattr(args, "config", None)
    if config_file is not None:
        try:
            transport = load_config(config_file).transport
        except ConfigError as exc:
            raise CommandError(f"--config: {exc}", USAGE) from None
        default_host = _DEFAULT_HOST if transport.host in _ANY_ADDRESS else transport.host
        default_port = transport.port
    else:
        default_host, default_port = _DEFAULT_HOST, DEFAULT_PORT
    return BrokerAddress(
        host if host is not None else default_host,
        parse_int(port, "--port", 1, 65535) if port is not None else default_port,
    )


async def open_client(args: argparse.Namespace) -> StompClient:
    """Connect with the options of ``add_connection_args``.

    Bad option values raise ``CommandError`` (status 2); connection failures
    propagate as the client's errors, for ``run`` to describe.
    """
    address = broker_address(args)
    heartbeat = _parse_heartbeat(args.heartbeat)
    timeout = parse_float(args.connect_timeout, "--connect-timeout")
    versions = (args.stomp_version,) if args.stomp_version else VERSIONS
    return await StompClient.connect(
        address.host,
        address.port,
        websocket_path=address.path if address.scheme == "ws" else None,
        versions=versions,
        vhost=args.vhost,
        login=args.login,
        passcode=args.passcode,
        client_id=args.client_id,
        heartbeat=heartbeat,
        connect_timeout=timeout,
    )


@asynccontextmanager
async def connected(args: argparse.Namespace) -> AsyncIterator[StompClient]:
    """``open_client`` for the duration of a block; the socket is closed at the
    end whatever happens (call ``disconnect()`` inside for a graceful end)."""
    client = await open_client(args)
    try:
        yield client
    finally:
        client.close()


def describe(exc: BaseException) -> str:
    """The one line a user is shown for a client failure."""
    if isinstance(exc, CannotConnect):
        return str(exc)
    if isinstance(exc, StompError):
        return f"broker refused: {exc.message or exc}"
    if isinstance(exc, ConnectionLost):
        return f"connection lost: {exc.reason}"
    if isinstance(exc, TimeoutError):
        return f"timed out waiting for the broker: {exc}"
    return str(exc)


def run(main: Coroutine[object, object, int]) -> int:
    """Run ``main`` on a fresh event loop; client failures become ``CommandError``."""
    try:
        return asyncio.run(main)
    except (StompClientError, TimeoutError) as exc:
        raise CommandError(describe(exc), FAILURE) from None
