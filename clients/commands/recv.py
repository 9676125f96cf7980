"""``minibroker recv``: subscribe to a destination and print what arrives.

Stops after ``--count`` messages or when nothing arrives for ``--timeout``
seconds (without either it runs until interrupted), then disconnects and
prints a summary on stderr. With ``--count N`` (and no ``--ack``) it takes
exactly N and leaves every other message untouched: it subscribes in
``client`` ack mode with a prefetch of N, so the broker sends at most N, and
acknowledges what it printed with one cumulative ACK written together with
the DISCONNECT (a broker dispatches nothing more to a client that says
goodbye). In ``auto`` mode the broker counts a message consumed as soon as it
is written to the socket (as ActiveMQ does), so ``auto`` is the default only
without a count. With an explicit ``--ack client`` or ``client-individual``
each message is acknowledged once printed, and what the broker sent beyond
``--count`` goes back to the queue flagged redelivered.
Exit status 1 when ``--count`` was not reached.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys

from ..cli import CommandError, silence_stdout
from ..stomp import ACK_MODES, Message, StompClientError
from ._common import (
    FAILURE,
    USAGE,
    add_connection_args,
    add_header_arg,
    connected,
    describe,
    destination_command,
    parse_float,
    parse_headers,
    parse_int,
    run,
)

__all__ = ["register", "format_message"]

SHOW = ("body", "headers", "json")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``recv`` subcommand."""
    parser = destination_command(subparsers, "recv", "receive messages from a destination", __doc__)
    parser.add_argument("--count", "-n", metavar="N", help="stop after N messages")
    parser.add_argument("--timeout", "-t", metavar="S", help="stop when nothing arrives for S seconds")
    parser.add_argument(
        "--ack",
        choices=ACK_MODES,
        help="ack mode of the subscription (default: with --count, client with a "
        "prefetch of N and one ACK at the end, which takes exactly N; auto without)",
    )
    parser.add_argument(
        "--prefetch",
        metavar="N",
        help="activemq.prefetchSize of the subscription (default with --count and no --ack: N)",
    )
    parser.add_argument("--selector", metavar="S", help="JMS selector of the subscription")
    parser.add_argument(
        "--no-ack",
        action="store_true",
        help="in a client ack mode, never acknowledge: the messages go back to the "
        "queue, flagged redelivered, when recv disconnects",
    )
    add_header_arg(parser, "SUBSCRIBE")
    parser.add_argument(
        "--show",
        choices=SHOW,
        default="body",
        help="print the body, headers and body, or one JSON object per message (default: %(default)s)",
    )
    add_connection_args(parser)
    parser.set_defaults(func=main)


def format_message(message: Message, show: str) -> str:
    """The text printed for ``message`` (without the final newline)."""
    if show == "json":
        record: dict[str, object] = {
            "destination": message.destination,
            "message_id": message.message_id,
            "subscription": message.subscription,
            "redelivered": message.redelivered,
            "headers": dict(message.headers),
        }
        try:
            record["body"] = message.body.decode("utf-8")
        except UnicodeDecodeError:
            record["body_base64"] = base64.b64encode(message.body).decode("ascii")
        return json.dumps(record)
    if show == "headers":
        lines = [f"{name}:{value}" for name, value in message.headers.items()]
        return "\n".join([*lines, "", message.text, ""])
    return message.text


def main(args: argparse.Namespace) -> int:
    """Run ``minibroker recv``."""
    count = None if args.count is None else parse_int(args.count, "--count", 1)
    timeout = None if args.timeout is None else parse_float(args.timeout, "--timeout")
    prefetch = None if args.prefetch is None else parse_int(args.prefetch, "--prefetch", 0)
    headers = parse_headers(args.header)
    return run(_recv(args, count, timeout, prefetch, headers))


async def _recv(
    args: argparse.Namespace, count: int | None, timeout: float | None, prefetch: int | None, headers: dict[str, str]
) -> int:
    dest = args.destination
    received = acked = 0
    ack = args.ack
    # With --count and no --ack: take exactly N. The window of N unacknowledged
    # messages never reopens before the end, and the one cumulative ACK leaves
    # in the same write as the DISCONNECT, so the broker sends nothing more.
    ack_at_end = ack is None and count is not None
    if ack is None:  # auto would lose what the broker sends beyond --count
        ack = "auto" if count is None else "client"
        if count is not None and prefetch is None:
            prefetch = count
    if args.no_ack and ack == "auto":
        raise CommandError("--no-ack needs a client ack mode: --ack client or client-individual (or --count)", USAGE)
    acking = ack != "auto" and not args.no_ack

    def summary(stopped: str) -> bool:
        """Print the summary line; True when --count was not reached."""
        short = count is not None and received < count
        noun = "message" if (count if short else received) == 1 else "messages"
        of = f" of {count}" if short else ""
        acks = f" (acked: {acked})" if ack != "auto" else ""
        print(f"received {received}{of} {noun} from {dest}{acks}{stopped}", file=sys.stderr)
        return short

    stopped = ""
    printed: Message | None = None  # the last message printed and not yet acknowledged
    async with connected(args) as client:
        try:
            sub = await client.subscribe(dest, ack=ack, prefetch=prefetch, selector=args.selector, headers=headers)
            while count is None or received < count:
                try:
                    message = await sub.get(timeout=timeout)
                except TimeoutError:
                    stopped = f"; nothing arrived for {timeout:g}s"
                    break
                try:
                    print(format_message(message, args.show), flush=True)
                except BrokenPipeError:  # e.g. piped into `head`: this one was not shown
                    silence_stdout()
                    stopped = "; output closed"
                    break
                received += 1
                if acking and not ack_at_end:
                    await client.ack(message)
                    acked += 1
                else:
                    printed = message
            if acking and ack_at_end and printed is not None:
                await client.ack(printed)  # cumulative: every message printed; corked with the DISCONNECT
                acked = received
            await client.disconnect()
        except (StompClientError, TimeoutError) as exc:
            raise CommandError(f"{describe(exc)} (after {received} received)", FAILURE) from None
        except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels us
            if acking and ack_at_end and printed is not None and acked < received:
                try:  # what was printed is taken; written at once (no wait), flushed by the close
                    await client.ack(printed)
                    acked = received
                except (StompClientError, TimeoutError):
                    pass
            summary("; interrupted")
            raise
    return FAILURE if summary(stopped) else 0
