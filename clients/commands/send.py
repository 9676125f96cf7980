"""``minibroker send``: send one message, or the same message N times.

The body comes from BODY, ``--file``, or stdin (BODY ``-``, or no BODY while
stdin is not a terminal). After the last SEND the command disconnects with a
receipt, so a clean exit means the broker has read every message even without
``--receipt``; ``--receipt`` also waits for each message's own RECEIPT, which
is where a broker applying producer flow control makes a producer wait.
"""

from __future__ import annotations

import argparse
import sys

from ..cli import CommandError
from ..stomp import StompClientError
from ._common import (
    FAILURE,
    USAGE,
    add_connection_args,
    add_header_arg,
    connected,
    describe,
    destination_command,
    parse_headers,
    parse_int,
    run,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``send`` subcommand."""
    parser = destination_command(subparsers, "send", "send messages to a destination", __doc__)
    parser.add_argument(
        "body", metavar="BODY", nargs="?", help="message body; '-' (or none, with stdin piped) reads stdin"
    )
    parser.add_argument("--file", "-f", metavar="F", help="read the body from file F")
    parser.add_argument(
        "--count", "-n", default="1", metavar="N", help="send the message N times (default: %(default)s)"
    )
    add_header_arg(parser, "SEND")
    parser.add_argument("--persistent", action="store_true", help="set persistent:true")
    parser.add_argument("--priority", metavar="P", help="set priority:P (0-9)")
    parser.add_argument("--receipt", action="store_true", help="ask a RECEIPT for every message and wait for it")
    add_connection_args(parser)
    parser.set_defaults(func=main)


def read_body(args: argparse.Namespace) -> bytes:
    """The body from BODY, ``--file`` or stdin."""
    if args.file is not None:
        if args.body is not None:
            raise CommandError("give the body as BODY or with --file, not both", USAGE)
        try:
            with open(args.file, "rb") as f:
                return f.read()
        except OSError as exc:
            raise CommandError(f"cannot read --file {args.file!r}: {exc.strerror}", USAGE) from None
    stdin = sys.stdin
    if args.body == "-" or (args.body is None and stdin is not None and not stdin.isatty()):
        if stdin is None:
            raise CommandError("BODY is '-' but there is no stdin", USAGE)
        try:
            return stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
        except OSError as exc:
            raise CommandError(f"cannot read the body from stdin: {exc}", USAGE) from None
    return (args.body or "").encode("utf-8")


def _accepted(written: int, count: int, receipts: bool) -> str:
    """How many of ``count`` the broker accepted before it refused one.

    With receipts each message counted had its RECEIPT. Without, ``written``
    messages left and the refused one is among them: the broker takes frames
    in order and stops at the refusal, so at most ``written - 1`` were accepted.
    """
    if receipts:
        return f"{written} of {count} accepted"
    most = max(written - 1, 0)
    if most == 0:
        return f"0 of {count} accepted"
    return f"at most {most} of {count} accepted; --receipt counts them exactly"


def main(args: argparse.Namespace) -> int:
    """Run ``minibroker send``."""
    headers = parse_headers(args.header)
    if args.persistent:
        headers["persistent"] = "true"
    if args.priority is not None:
        headers["priority"] = str(parse_int(args.priority, "--priority", 0, 9))
    count = parse_int(args.count, "--count", 1)
    body = read_body(args)
    return run(_send(args, body, headers, count))


async def _send(args: argparse.Namespace, body: bytes, headers: dict[str, str], count: int) -> int:
    dest = args.destination
    sent = 0
    async with connected(args) as client:
        try:
            for _ in range(count):
                await client.send(dest, body, headers, receipt=args.receipt)
                sent += 1
            await client.disconnect()
        except (StompClientError, TimeoutError) as exc:
            raise CommandError(f"{describe(exc)} ({_accepted(sent, count, args.receipt)})", FAILURE) from None
    noun = "message" if count == 1 else "messages"
    receipts = f" (receipts: {sent})" if args.receipt else ""
    print(f"sent {sent} {noun} to {dest}{receipts}")
    return 0
