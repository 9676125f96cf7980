"""``minibroker serve``: run the broker in the foreground."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from typing import Any

from minibroker import corebuild
from minibroker.config import listener_port, load_config
from minibroker.errors import ConfigError, StoreFailure
from minibroker.eventloop import LOOPS, from_environment, resolve
from minibroker.eventloop import run as run_loop

LOG_LEVELS = ("debug", "info", "warning", "error")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the broker",
        description="Run the STOMP broker in the foreground until SIGINT or SIGTERM. "
        "Exits with status 3 if its store failed (a failed fsync or disk I/O error) while it ran.",
    )
    p.add_argument("--config", metavar="FILE", help="TOML configuration (default: the embedded one)")
    p.add_argument("--host", help="address to listen on (overrides transport.host)")
    p.add_argument("--port", type=_port, help="STOMP port (overrides transport.port)")
    p.add_argument(
        "--websocket-port",
        type=_listener_port,
        help='STOMP over WebSocket port (overrides transport.websocket_port; 0 = off, "any" = a free one)',
    )
    p.add_argument(
        "--console-port",
        type=_listener_port,
        help='web console and /metrics port (overrides console.port; 0 = off, "any" = a free one)',
    )
    p.add_argument("--data-dir", metavar="DIR", help="data directory (overrides broker.data_dir)")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="logging threshold (default: info)")
    p.add_argument(
        "--loop",
        choices=LOOPS,
        help="event loop: auto = uvloop when installed (the fast extra), else asyncio "
        "(overrides MINIBROKER_LOOP and transport.event_loop)",
    )
    p.add_argument("--trace", metavar="FILE", help="write the JSON-lines trace to FILE (overrides broker.trace)")
    p.add_argument(
        "--trace-format",
        choices=("auto", "jsonl", "parquet", "both"),
        help="the trace as JSON lines, Parquet segments in FILE.parquet/ (needs pyarrow), or both; "
        "auto (the default): both where pyarrow is installed (overrides broker.trace_format)",
    )
    p.set_defaults(func=run)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be an integer from 0 to 65535, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be an integer from 0 to 65535, not {text!r}")
    return value


def _listener_port(text: str) -> int:
    try:
        return listener_port(int(text) if text.isdigit() else text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, not {text!r}") from None


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    # The first line says which build of the core runs; a compiled build asked for
    # (MINIBROKER_CORE=compiled) and not loaded is refused rather than run slower unsaid.
    logging.getLogger("minibroker").info("%s", corebuild.describe())
    missing = corebuild.requested_but_missing()
    if missing:
        raise ConfigError(missing)
    config = load_config(args.config)
    transport: dict[str, Any] = {}
    if args.host is not None:
        transport["host"] = args.host
    if args.port is not None:
        transport["port"] = args.port
    if args.websocket_port is not None:
        transport["websocket_port"] = args.websocket_port
    console: dict[str, Any] = {}
    if args.console_port is not None:
        console["port"] = args.console_port
    broker_section: dict[str, Any] = {}
    if args.data_dir is not None:
        broker_section["data_dir"] = args.data_dir
    if args.trace is not None:
        broker_section["trace"] = args.trace
    if args.trace_format is not None:
        broker_section["trace_format"] = args.trace_format
    config = config.replace(transport=transport, console=console, broker=broker_section)
    from minibroker.edge.server import serve

    loop = args.loop or from_environment(config.transport.event_loop)  # --loop, MINIBROKER_LOOP, the config
    resolve(loop)  # uvloop asked for and not installed: a ConfigError saying how to install it
    freeze_start_up_heap()
    try:
        run_loop(serve(config), loop)  # a port in use is a ConfigError naming it
    except StoreFailure as exc:  # logged CRITICAL already; what the operator does next: docs/storage.md
        print(f"minibroker serve: {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


def freeze_start_up_heap() -> None:
    """Take what is alive before the loop starts (the modules and what importing them
    made: about 29,000 objects, all of them living as long as the process) out of the
    cyclic garbage collector's generations (``gc.freeze``). A full collection, which a
    backlog of messages brings on now and then, then walks only what came after: a
    pause of well under a millisecond instead of one that walks every function and
    class of the program. The broker's own objects (the store it recovers, its
    connections) are made later and stay collectable."""
    gc.collect()
    gc.freeze()
