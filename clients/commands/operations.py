"""``minibroker purge | delete | close | browse | move``: the broker's operations.

Each subcommand is one request to the broker's admin protocol over STOMP (a
SEND to ``/queue/ActiveMQ.Admin.<Operation>``, answered with one JSON
message: docs/admin.md), with ``stat``'s connection options. The answer is
printed as a line (``--json``: as it came); a refusal (no ``admin`` right, no
such destination ...) is the broker's ERROR, printed, exit status 1.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import re
from typing import Any

from ..cli import CommandError
from ..stomp import StompClient, StompClientError
from ._common import FAILURE, add_connection_args, connected, describe, parse_float, parse_int, run

__all__ = ["register", "request"]

_REPLY_QUEUE = "/temp-queue/minibroker-admin"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        parser = subparsers.add_parser(name, help=help, description=description)
        parser.add_argument("--json", action="store_true", help="print the broker's answer as JSON")
        parser.add_argument("--timeout", default="10", metavar="S", help="how long to wait for the broker's answer")
        add_connection_args(parser)
        return parser

    parser = command(
        "purge",
        "drop every waiting message of a queue",
        "Drop every message of queue DEST that waits for a consumer (cached or on disk). "
        "Messages delivered and not yet acknowledged stay with their consumers.",
    )
    parser.add_argument("destination", metavar="DEST", help="the queue, e.g. /queue/orders")
    parser.set_defaults(func=_main, operation="Purge")

    parser = command(
        "delete",
        "remove a destination and its messages",
        "Remove destination DEST with its messages (and a topic's durable subscriptions). "
        "Refused while it has consumers or blocked producers: close them first.",
    )
    parser.add_argument("destination", metavar="DEST", help="e.g. /queue/old or /topic/prices")
    parser.set_defaults(func=_main, operation="Delete")

    parser = command(
        "close",
        "close a connection",
        "Close connection CONNECTION (the id `minibroker stat "
        "--connections` shows): it gets an ERROR saying an administrator closed it.",
    )
    parser.add_argument(
        "connection", metavar="CONNECTION", help="the connection's id, or the session id its CONNECTED frame gave"
    )
    parser.set_defaults(func=_main, operation="Close")

    parser = command(
        "browse",
        "show the first messages of a queue",
        "Show the first messages waiting in queue DEST, headers and body, without consuming them.",
    )
    parser.add_argument("destination", metavar="DEST", help="the queue, e.g. /queue/ActiveMQ.DLQ")
    parser.add_argument("--count", "-n", default="10", metavar="N", help="how many (default 10, at most 1000)")
    parser.add_argument(
        "--body-limit",
        default="65536",
        metavar="BYTES",
        help="show at most this much of each body (default %(default)s)",
    )
    parser.set_defaults(func=_main, operation="Browse")

    parser = command(
        "move",
        "move messages to another queue (a DLQ's back to theirs)",
        "Move the waiting messages of queue SRC to queue DEST; without DEST, each to the queue its "
        "original-destination header names (a dead letter queue's messages back to where they failed).",
    )
    parser.add_argument("destination", metavar="SRC", help="the queue to move from, e.g. /queue/ActiveMQ.DLQ")
    parser.add_argument("to", metavar="DEST", nargs="?", help="the queue to move to (default: each message's own)")
    parser.add_argument(
        "--selector",
        "-s",
        help='only the messages this selector accepts, e.g. "JMSPriority > 4" '
        "(a STOMP priority header is JMSPriority, as in ActiveMQ)",
    )
    parser.add_argument("--count", "-n", metavar="N", help="at most N messages")
    parser.set_defaults(func=_main, operation="Move")


def _headers(args: argparse.Namespace) -> dict[str, str]:
    """The request's headers from the command line (checked before connecting)."""
    operation = args.operation
    if operation == "Close":
        text = str(args.connection)
        if "-" in text:  # the session id CONNECTED gave (<broker>-<boot>-<id>): the broker reads it
            return {"connection": text}
        return {"connection": str(parse_int(text, "CONNECTION", 1))}
    headers = {"target": args.destination}
    if operation == "Browse":
        headers["count"] = str(parse_int(args.count, "--count", 1, 1000))
        headers["body-limit"] = str(parse_int(args.body_limit, "--body-limit", 0))
    if operation == "Move":
        if args.to:
            headers["to"] = args.to
        if args.selector:
            headers["selector"] = args.selector
        if args.count is not None:
            headers["count"] = str(parse_int(args.count, "--count", 1))
    return headers


async def request(client: StompClient, operation: str, headers: dict[str, str], timeout: float) -> dict[str, Any]:
    """Ask a connected broker to carry out ``operation`` (``Purge`` ...); its JSON answer."""
    reply = await client.subscribe(_REPLY_QUEUE)
    try:
        await client.send(
            f"/queue/ActiveMQ.Admin.{operation}",
            b"",
            headers={**headers, "reply-to": _REPLY_QUEUE, "correlation-id": operation},
        )
        message = await reply.get(timeout=timeout)
        return json.loads(message.body)
    finally:
        if reply.active:
            await reply.unsubscribe()


def _main(args: argparse.Namespace) -> int:
    headers = _headers(args)
    timeout = parse_float(args.timeout, "--timeout")
    return run(_operate(args, headers, timeout))


async def _operate(args: argparse.Namespace, headers: dict[str, str], timeout: float) -> int:
    async with connected(args) as client:
        try:
            answer = await request(client, args.operation, headers, timeout)
        except TimeoutError:
            raise CommandError(f"the broker did not answer within {timeout:g}s", FAILURE) from None
        except StompClientError as exc:
            raise CommandError(describe(exc), FAILURE) from None
        # done already where it fails (a close of this very connection ends it with an ERROR)
        with contextlib.suppress(StompClientError, TimeoutError):
            await client.disconnect()
    print(json.dumps(answer, sort_keys=True) if args.json else format_answer(answer, getattr(args, "selector", None)))
    return 0


def format_answer(answer: dict[str, Any], selector: str | None = None) -> str:
    """One operation's answer as a user reads it (``selector``: a move's, to name it)."""
    operation = answer.get("operation")
    if operation == "purge":
        left = answer["size"]  # what a purge leaves is delivered, not yet acknowledged
        kept = "none left" if not left else f"{left} unacknowledged stay with their consumers"
        return f"purged {_messages(answer['purged'])} from {answer['destination']} ({kept})"
    if operation == "delete":
        return f"deleted {answer['destination']} ({_messages(answer['purged'])} dropped)"
    if operation == "close":
        return (
            f"closed connection {answer['connection']} from {answer['remoteAddress'] or '?'} "
            f"(user {answer['user']}, client-id {answer['clientId'] or '-'})"
        )
    if operation == "browse":
        return _format_browse(answer)
    if operation == "move":
        return _format_move(answer, selector)
    return json.dumps(answer, sort_keys=True)


def _format_move(answer: dict[str, Any], selector: str | None) -> str:
    """``moved 3 messages from /queue/a to /queue/b``; when none moved, why:
    nothing waiting, or the selector matched none of what waits."""
    moved_to: dict[str, int] = answer["movedTo"]
    text = f"moved {_messages(answer['moved'])} from {answer['from']}"
    if answer.get("to"):
        text += f" to {answer['to']}"
    elif moved_to:
        text += ": " + ", ".join(f"{n} to {address}" for address, n in moved_to.items())
    else:
        text += " to their original destinations"
    waiting = answer.get("waiting")
    if waiting == 0:
        text += f" ({answer['from']} has no message waiting for a consumer)"
    elif selector and answer.get("selected") == 0 and waiting is not None:
        text += f": the selector {selector!r} matched none of the {_messages(waiting)} waiting"
        if _PLAIN_PRIORITY.search(selector):
            text += " (a STOMP priority header is JMSPriority in a selector, as in ActiveMQ)"
    for reason, n in answer["skipped"].items():
        text += f"\nskipped {n}: {reason}"
    return text


#: ``priority`` as a selector identifier (not JMSPriority): a user property no STOMP message has.
_PLAIN_PRIORITY = re.compile(r"(?<![\w.'])priority\b")


def _messages(count: int) -> str:
    return f"{count} message" if count == 1 else f"{count} messages"


def _format_browse(answer: dict[str, Any]) -> str:
    messages = answer["messages"]
    waiting = answer.get("readyCount", answer["size"])
    lines = [
        f"{answer['destination']}: {_messages(answer['size'])}, {waiting} waiting for a consumer; "
        f"the first {len(messages)} waiting shown"
    ]
    for n, m in enumerate(messages, 1):
        flags = ["persistent" if m["persistent"] else "non-persistent", f"priority {m['priority']}"]
        if m["redelivered"]:
            flags.append("redelivered")
        lines += ["", f"#{n} {m['messageId']} ({', '.join(flags)})"]
        lines += [f"  {k}: {v}" for k, v in sorted(m["headers"].items())]
        body = m["body"]
        if m["bodyEncoding"] == "base64":
            body = repr(base64.b64decode(body))
        cut = ", cut" if m["bodyTruncated"] else ""
        lines.append(f"  body ({m['bodySize']} bytes{cut}): {body}")
    return "\n".join(lines)
