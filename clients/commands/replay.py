"""``minibroker replay``: play an action table against a STOMP broker.

ACTIONS is what ``minibroker workload generate`` wrote: its output directory,
the actions.jsonl or actions.parquet directory in it, or one JSON-lines file
of actions sorted by t. Every client of the table gets its own connection and
performs its actions t / --speed seconds after the start; consumers ACK each
message after their process time (in the client ack modes). Only standard
STOMP is sent, plus activemq.prefetchSize where the table sets a prefetch, so
ActiveMQ, RabbitMQ and minibroker all take it.

A progress bar goes to stderr when it is a terminal; each new error is
printed once as it happens; at the end a summary (actions, messages, lag
behind schedule, latency, errors) goes to stdout. --trace FILE writes the
client-side trace (connect, sent, received, acked, disconnect, error) that
minibroker analyze reads. Exit status 1 when any error occurred.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from minibroker.frames import VERSIONS
from minibroker.trace import Trace

from ..cli import CommandError
from ..replay import (
    RECEIPT_MODES,
    Progress,
    Replayer,
    ReplayError,
    ReplayOptions,
    ReplayReport,
    open_table,
    parse_shard,
    shard,
)
from ._common import (
    FAILURE,
    USAGE,
    _parse_heartbeat,
    add_connection_args,
    broker_address,
    describe,
    parse_float,
    parse_int,
)

__all__ = ["register"]

FD_MARGIN = 64  # descriptors kept for files, the trace and the event loop


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``replay`` subcommand."""
    parser = subparsers.add_parser(
        "replay",
        help="play a workload's action table against a broker",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("actions", metavar="ACTIONS", help="the action table (see above)")
    parser.add_argument(
        "--speed",
        default="1",
        metavar="X",
        help="play X times faster than the table's clock, process times included (default: %(default)s)",
    )
    parser.add_argument("--trace", metavar="FILE", help="write the client-side trace to FILE")
    parser.add_argument("--broker-name", metavar="NAME", help="the trace's broker field (default: HOST:PORT)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--max-clients",
        default="1000",
        metavar="N",
        help="connections open at once; a client beyond is not connected and its "
        "actions are skipped, as errors (default: %(default)s)",
    )
    parser.add_argument(
        "--receipts",
        choices=RECEIPT_MODES,
        default="never",
        help="which sends wait for the broker's RECEIPT (as a JMS producer "
        "sends persistent messages synchronously) (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        default="30",
        metavar="S",
        help="seconds to wait for a RECEIPT or a blocked write (default: %(default)s)",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="play only the clients of shard I of N (0 <= I < N, by a hash of the "
        "client's name): N processes share one table",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_connection_args(parser)
    client_id = parser._option_string_actions["--client-id"]
    client_id.help = "prefix for the client-id headers the table asks for (PREFIX-ID)"
    parser.set_defaults(func=main)


def _raise_fd_limit(max_clients: int) -> None:
    """Let the process open ``max_clients`` sockets (soft limit up to the hard one)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Unix
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_clients + FD_MARGIN
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < wanted:
            raise CommandError(
                f"--max-clients {max_clients} needs {wanted} file descriptors, but the limit is {hard} (ulimit -n)",
                USAGE,
            )


def options_from(args: argparse.Namespace) -> ReplayOptions:
    """The replay options of the parsed command line (``CommandError`` for bad values)."""
    speed = parse_float(args.speed, "--speed")
    address = broker_address(args)
    if address.scheme != "stomp":
        raise CommandError(f"replay speaks STOMP over TCP: give a stomp:// URL, not {address}", USAGE)
    return ReplayOptions(
        host=address.host,
        port=address.port,
        speed=speed,
        versions=(args.stomp_version,) if args.stomp_version else VERSIONS,
        vhost=args.vhost,
        login=args.login,
        passcode=args.passcode,
        heartbeat=_parse_heartbeat(args.heartbeat),
        connect_timeout=parse_float(args.connect_timeout, "--connect-timeout"),
        timeout=parse_float(args.timeout, "--timeout"),
        client_id_prefix=args.client_id,
        receipts=args.receipts,
        max_clients=parse_int(args.max_clients, "--max-clients", 1),
        broker_name=args.broker_name,
    )


def _warn(text: str) -> None:
    print(f"minibroker replay: {text}", file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    """Run ``minibroker replay``."""
    options = options_from(args)
    part = None
    if args.shard is not None:
        try:
            part = parse_shard(args.shard)
        except ValueError as exc:
            raise CommandError(f"bad --shard: {exc}", USAGE) from None
    if args.trace is not None and not Path(args.trace).parent.is_dir():
        raise CommandError(f"cannot write --trace {args.trace!r}: no such directory", USAGE)
    _raise_fd_limit(options.max_clients)
    try:
        table = open_table(args.actions, log=_warn)
    except ReplayError as exc:
        raise CommandError(str(exc), USAGE) from None
    target = f"{options.host}:{options.port}"
    trace = None
    try:
        if args.trace is not None:
            try:
                trace = Trace(args.trace, time.time, broker=options.broker_name or target)
            except OSError as exc:
                raise CommandError(f"cannot write --trace {args.trace!r}: {exc.strerror or exc}", USAGE) from None
        progress = None
        if not args.no_progress and sys.stderr is not None and sys.stderr.isatty():
            progress = Progress(sys.stderr, table.duration)
        replayer = Replayer(options, trace=trace, progress=progress, describe=describe, warn=_warn)
        actions = table.actions()
        if part is not None:
            actions = shard(actions, *part)
        try:
            report = asyncio.run(replayer.run(actions))
        except KeyboardInterrupt:
            _print(args, replayer.report(), options)
            print("interrupted", file=sys.stderr)
            return 130
    except ReplayError as exc:
        raise CommandError(str(exc), FAILURE) from None
    finally:
        if trace is not None:
            trace.close()
        table.close()
    _print(args, report, options)
    return 0 if report.ok else FAILURE


def _print(args: argparse.Namespace, report: ReplayReport, options: ReplayOptions) -> None:
    if args.json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        print(
            report.render(
                source=args.actions, target=f"{options.host}:{options.port}", speed=options.speed, trace=args.trace
            )
        )
