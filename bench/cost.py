#!/usr/bin/env python3
"""The broker core's cost per message, in process: no sockets, no client.

The socket benchmarks (compare.py, backlog.py) move by 20-40% on this shared
machine from one minute to the next, too much to see a 5% change in the code.
This one drives the sans-IO core directly and measures one of:

- CPU time per message (``time.process_time``, the fastest of ``--reps``), or
- with ``--callgrind`` (needs ``valgrind``), machine instructions per message,
  counted by valgrind's callgrind: the same on every run, whatever else the
  machine does, so two versions of the code can be compared to the percent.
  Each count is the difference between a run of N and a run of N/4 messages, so
  start-up and set-up cancel out. About a minute per scenario.

Scenarios:

``queue``   scenario A's path: SENDs as the shared harness writes them, to a queue
            with one auto-ack consumer (parse, route, dispatch, encode);
``topic``   scenario C's: the same SENDs to a topic with four auto-ack
            subscribers (each message encoded and written four times);
``ack``     scenario D's: one SEND, its MESSAGE and the consumer's ACK, at
            client-individual with prefetch 1;
``page-in`` a recovered journal of persistent messages, all
            store-only, paged in by the store cursor and consumed.
``through`` the "through" phase (``bench/backlog.py``): a standing backlog
            of N/2 persistent messages under a 4 MB limit (most store-only),
            then an auto-ack consumer while a producer sends N/2 more, all
            paged in; ``through-plain`` the same with a 1 GB limit (all
            cached). Their difference is what paging costs a queue in use.

With ``--traced`` the broker writes its trace as ``serve --trace`` does (the
JSON made by a writer process, fed through a spool file): the cost is then
the broker's side of tracing, the writer process not counted.

    python bench/cost.py [--scenarios queue,ack,page-in] [--messages 20000] [--callgrind] [--traced]
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = ("queue", "topic", "ack", "page-in", "through", "through-plain")
_CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"
_BODY = b"x" * 256
#: SENDs per producer turn in the through scenarios (half the messages make the backlog first).
_THROUGH_BATCH = 50


def _send(i: int) -> bytes:
    """A SEND as bench/harness/stomp_bench.py writes it."""
    return (
        b"SEND\ndestination:/queue/A\ncontent-length:256\nbench-run:abcdef012345\nbench-seq:%d %d\n\n"
        % (i, time.monotonic_ns())
        + _BODY
        + b"\x00"
    )


#: With ``--traced``: the directory the brokers' traces go to, and the traces open.
_trace_dir: Path | None = None
_traces: list = []  # type: ignore[type-arg]


def _broker(config=None, store=None):  # type: ignore[no-untyped-def]
    from minibroker.config import BrokerConfig
    from minibroker.connection import SystemClock
    from minibroker.core import Broker

    trace = None
    if _trace_dir is not None:
        from minibroker.trace import Trace

        trace = Trace(_trace_dir / f"trace-{len(_traces)}.jsonl", time.time, offload=True)
        _traces.append(trace)
    return Broker(config or BrokerConfig(), SystemClock(), store=store, trace=trace)


def _producer_and_consumer(subscribe_headers: bytes):  # type: ignore[no-untyped-def]
    """A broker with a connected producer and a consumer subscribed to /queue/A."""
    b = _broker()
    p, c = b.open_session("p"), b.open_session("c")
    b.receive_data(p, _CONNECT)
    b.receive_data(c, _CONNECT)
    b.receive_data(c, b"SUBSCRIBE\nid:1\ndestination:/queue/A\n" + subscribe_headers + b"\n\x00")
    b.take_actions()
    b.actions_done()
    return b, p, c


def queue(n: int) -> None:
    b, p, _ = _producer_and_consumer(b"ack:auto\n")
    batch = b"".join(_send(i) for i in range(50))
    for _ in range(max(1, n // 50)):
        b.receive_data(p, batch)
        b.take_actions()
        b.actions_done()


def topic(n: int) -> int:
    """Returns the deliveries written (four per message)."""
    from minibroker.core import Write

    b = _broker()
    p = b.open_session("p")
    b.receive_data(p, _CONNECT)
    for i in range(4):
        c = b.open_session(f"c{i}")
        b.receive_data(c, _CONNECT)
        b.receive_data(c, b"SUBSCRIBE\nid:1\ndestination:/topic/A\nack:auto\n\n\x00")
    b.take_actions()
    b.actions_done()
    batch = b"".join(_send(i).replace(b"/queue/A", b"/topic/A") for i in range(50))
    delivered = 0
    for _ in range(max(1, n // 50)):
        b.receive_data(p, batch)
        delivered += sum(a.data.count(b"\nsubscription:") for a in b.take_actions() if type(a) is Write)
        b.actions_done()
    return delivered


def ack(n: int) -> None:
    from minibroker.core import Write

    b, p, c = _producer_and_consumer(b"ack:client-individual\nactivemq.prefetchSize:1\n")
    for i in range(n):
        b.receive_data(p, _send(i))
        ack = b""
        for action in b.take_actions():
            if type(action) is Write and action.session == c:
                at = action.data.index(b"\nack:") + 5
                ack = b"ACK\nid:" + action.data[at : action.data.index(b"\n", at)] + b"\n\n\x00"
        b.actions_done()
        b.receive_data(c, ack)
        if b.take_actions():  # as the server: actions_done once they are carried out, if there were any
            b.actions_done()


def _page_in_config(memory_limit: str = "4 mb"):  # type: ignore[no-untyped-def]
    from minibroker.config import parse_config

    return parse_config({"system_usage": {"memory_limit": memory_limit}, "store": {"fsync": "never"}})


def fill_journal(directory: Path, n: int) -> None:
    """N persistent messages on /queue/A, written as the broker writes them."""
    from minibroker.durability import MessageStore, encode_payload

    store = MessageStore(_page_in_config().store, directory)
    for seq in range(1, n + 1):
        headers = {"destination": "/queue/A", "persistent": "true", "bench-seq": str(seq)}
        store.enqueue(
            "/queue/A",
            encode_payload(
                seq, f"ID:bench-1-{seq}", headers, _BODY, persistent=True, priority=4, expires=0, timestamp=0
            ),
        )
    store.close()


def page_in(directory: Path) -> int:
    """Recover the journal in ``directory`` and drain /queue/A through the store cursor."""
    from minibroker.durability import MessageStore

    config = _page_in_config()
    broker = _broker(config, MessageStore(config.store, directory))
    broker.recover()
    queue = broker.destinations["/queue/A"]
    drained = 0
    while queue.cursor.page_in():
        with broker.turn():  # a turn ends: its dequeues are written (MessageStore.flush)
            while queue.pending:
                broker.hooks.message_consumed(queue, queue.pending.popleft())
                drained += 1
        broker.take_actions()
    return drained


def through(n: int, memory_limit: str) -> int:
    """The "through" phase in process (see the module docstring); returns the messages received."""
    from minibroker.core import Write
    from minibroker.durability import MessageStore

    config = _page_in_config(memory_limit)
    batch = b"".join(_send(i).replace(b"SEND\n", b"SEND\npersistent:true\n", 1) for i in range(_THROUGH_BATCH))
    with tempfile.TemporaryDirectory(prefix="minibroker-cost-through-") as data:
        b = _broker(config, MessageStore(config.store, data))
        p, c = b.open_session("p"), b.open_session("c")
        b.receive_data(p, _CONNECT)
        b.receive_data(c, _CONNECT)
        b.take_actions()
        b.actions_done()
        turns = n // (2 * _THROUGH_BATCH)
        for _ in range(turns):  # the standing backlog
            b.receive_data(p, batch)
            b.take_actions()
            b.actions_done()
        b.receive_data(c, b"SUBSCRIBE\nid:1\ndestination:/queue/A\nack:auto\n\n\x00")
        received = 0
        for turn in itertools.count():
            if turn < turns:
                b.receive_data(p, batch)
            actions = b.take_actions()
            received += sum(a.data.count(b"\nsubscription:") for a in actions if type(a) is Write and a.session == c)
            b.actions_done()
            if turn >= turns and not actions:
                break
        b.close()
    return received


def _run_once(scenario: str, n: int, journal: Path | None) -> float:
    """CPU seconds for ``n`` messages of ``scenario`` (``journal``: a filled copy, for page-in)."""
    started = time.process_time()
    if scenario == "queue":
        queue(n)
    elif scenario == "topic":
        expected = 4 * 50 * max(1, n // 50)
        if topic(n) != expected:
            raise SystemExit(f"topic delivered the wrong number of messages (expected {expected})")
    elif scenario == "ack":
        ack(n)
    elif scenario.startswith("through"):
        expected = 2 * _THROUGH_BATCH * (n // (2 * _THROUGH_BATCH))
        if through(n, "1 gb" if scenario == "through-plain" else "4 mb") != expected:
            raise SystemExit(f"{scenario} received the wrong number of messages (expected {expected})")
    else:
        assert journal is not None
        if page_in(journal) != n:
            raise SystemExit(f"page-in drained the wrong number of messages (expected {n})")
    while _traces:
        _traces.pop().close()
    return time.process_time() - started


def _instructions(scenario: str, n: int, tmp: Path) -> int:
    """Instructions callgrind counts for a whole child run of ``n`` messages."""
    args = [sys.executable, str(Path(__file__).resolve()), "--child", scenario, "--messages", str(n)]
    if _trace_dir is not None:
        args += ["--traced-to", str(_trace_dir)]
    if scenario == "page-in":
        journal = tmp / f"journal-{n}"
        shutil.rmtree(journal, ignore_errors=True)
        shutil.copytree(tmp / f"filled-{n}", journal)
        args += ["--journal", str(journal)]
    p = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *args], capture_output=True, text=True
    )
    for line in p.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise SystemExit(f"callgrind gave no count for {scenario}:\n{p.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, from %(default)s")
    ap.add_argument("--messages", type=int, default=20_000, help="messages per run (default %(default)s)")
    ap.add_argument("--reps", type=int, default=5, help="runs per scenario for CPU time; the fastest counts")
    ap.add_argument("--callgrind", action="store_true", help="count instructions with valgrind instead")
    ap.add_argument("--traced", action="store_true", help="the broker writes its trace (as serve --trace does)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--journal", help=argparse.SUPPRESS)
    ap.add_argument("--traced-to", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    global _trace_dir
    if a.child:  # one measured run, under callgrind
        _trace_dir = Path(a.traced_to) if a.traced_to else None
        _run_once(a.child, a.messages, Path(a.journal) if a.journal else None)
        return 0
    scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r}: choose from {', '.join(SCENARIOS)}")
    if a.messages < 8:
        ap.error(f"--messages must be at least 8, not {a.messages}")
    if a.callgrind and shutil.which("valgrind") is None:
        ap.error("--callgrind needs valgrind (apt-get install -y valgrind)")
    small = a.messages // 4
    with tempfile.TemporaryDirectory(prefix="minibroker-cost-") as tmp_name:
        tmp = Path(tmp_name)
        if a.traced:
            _trace_dir = tmp / "traces"
            _trace_dir.mkdir()
        if "page-in" in scenarios:
            for n in (small, a.messages):
                fill_journal(tmp / f"filled-{n}", n)
        print(
            f"# broker core, in process: {a.messages:,} messages per run"
            + (" (instructions: callgrind, run of N minus run of N/4)" if a.callgrind else f" (fastest of {a.reps})")
            + (", traced" if a.traced else "")
        )
        print("| scenario | " + ("instructions / message" if a.callgrind else "CPU us / message") + " |")
        print("|---|---|")
        for scenario in scenarios:
            if a.callgrind:
                per = (_instructions(scenario, a.messages, tmp) - _instructions(scenario, small, tmp)) / (
                    a.messages - small
                )
                print(f"| {scenario} | {per:,.0f} |", flush=True)
                continue
            best = float("inf")
            for rep in range(a.reps):
                journal = None
                if scenario == "page-in":
                    journal = tmp / f"journal-{rep}"
                    shutil.copytree(tmp / f"filled-{a.messages}", journal)
                best = min(best, _run_once(scenario, a.messages, journal))
                if journal is not None:
                    shutil.rmtree(journal)
            print(f"| {scenario} | {best / a.messages * 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
