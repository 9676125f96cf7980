#!/usr/bin/env python3
"""Does a slow STOMP 1.0 client-ack consumer that leaves mid-stream lose a message?

Each round fills a queue with N messages and runs ``leave_mid_stream.pl`` (Perl's
Net::Stomp: client ack, prefetch 1, a 4 kB receive buffer, 20 ms before each ACK;
after SECONDS a topic subscription with a receipt, one queue MESSAGE left
unacknowledged, DISCONNECT; then a drainer at auto ack and prefetch 500), and
compares what the clients got (acknowledged plus drained, by body) with what
the queue still holds afterwards. **missing**: neither client got it; **lost**:
missing and not in the queue either (consumed by no one).

When the drainer stops matters. ``--stop count`` (the default) reads until it
has every message the queue should hold, silence of ``--timeout`` seconds ending
it anyway. ``--stop idle`` stops after ``--idle`` seconds without a frame, as a
user's script does: but silence is not emptiness. At auto ack a broker counts a
message consumed when it hands it to the socket (ActiveMQ too), so a drainer
that leaves while its broker is late (a starved process, a busy disk) loses
whatever was on its way. ``--stall S`` shows it on purpose: the broker stalls S
seconds once the drainer has ``--stall-at`` messages (minibroker: its event loop
blocked; ``--activemq``: the JVM stopped by SIGSTOP), the same for both brokers.

Finding where a missing message went: ``--grace S`` keeps the drainer reading S
seconds after it would have stopped and names what came then ("late": the
message reached the socket after the drainer gave up), and ``--trace FILE``
records the broker's trace and says, for each missing or late message, where
the broker last saw it (dispatched to which connection and when, acknowledged,
redelivered), beside the broker's event loop stalls of the round (times in
seconds from the drainer's last message). Needs Net::Stomp (`make net-stomp`);
``--activemq`` needs ActiveMQ (``bench/brokers.py``) and ports 61613 and 61616.

    python bench/leave_mid_stream.py --rounds 20 [--messages 5000] [--size 100]
        [--seconds 1] [--stop count|idle] [--idle 0.5] [--timeout 30]
        [--non-persistent] [--grace 0] [--trace FILE] [--stall 0 --stall-at 1] [--activemq]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from brokers import ActiveMQ

from clients.labs.looplag import LoopLag
from clients.labs.runner import LiveBroker
from minibroker.config import load_config
from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode

PERL = Path(__file__).with_suffix(".pl")


class TimedLag(LoopLag):
    """``LoopLag`` that also notes when each late wake-up ended (epoch seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.stalls: list[tuple[float, float]] = []  # (woke at, how late)

    async def sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.INTERVAL
            await asyncio.sleep(self.INTERVAL)
            late = max(0.0, loop.time() - asked)
            self.samples.append(late)
            if late >= 0.05:
                self.stalls.append((time.time(), late))


def produce(port: int, queue: str, messages: int, size: int, persistent: bool) -> None:
    """Send ``m<i>.xxx...`` bodies to ``queue``; return once the last one is receipted."""
    frames = []
    for i in range(messages):
        headers = {"destination": queue}
        if persistent:
            headers["persistent"] = "true"
        if i == messages - 1:
            headers["receipt"] = "all-sent"
        frames.append(encode(Frame("SEND", headers, f"m{i}.".encode() + b"x" * size), "1.2"))
    with socket.create_connection(("127.0.0.1", port)) as producer:
        producer.sendall(encode(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})))
        producer.sendall(b"".join(frames))
        parser, got = FrameParser(role="client", version="1.2"), list[Frame]()
        while not any(f.command in ("RECEIPT", "ERROR") for f in got):
            got += parser.feed(producer.recv(65536))


class InProcess:
    """minibroker serving in this process (``LiveBroker``): its queue statistics and
    trace are at hand; a stall blocks its event loop, as a starved process would."""

    name = "minibroker"

    def __init__(self, broker: LiveBroker) -> None:
        self.broker = broker

    @property
    def port(self) -> int:
        return self.broker.port

    def stall(self, seconds: float) -> None:
        """Block the broker's event loop for ``seconds``; return once it is blocked."""
        assert self.broker._loop is not None
        started = threading.Event()

        def block() -> None:
            started.set()
            time.sleep(seconds)

        self.broker._loop.call_soon_threadsafe(block)
        started.wait(30)

    def stats(self, queue: str) -> tuple[int, int] | None:
        dest = self.broker.server.broker.destinations[queue]
        return dest.dequeued, dest.size()


class Stopped:
    """A broker in another process (ActiveMQ): a stall is SIGSTOP, then SIGCONT."""

    def __init__(self, name: str, port: int, pid: int) -> None:
        self.name, self.port, self.pid = name, port, pid

    def stall(self, seconds: float) -> None:
        """Stop the broker's process for ``seconds``; return once it is stopped (SIGCONT follows)."""
        os.kill(self.pid, signal.SIGSTOP)
        threading.Timer(seconds, os.kill, (self.pid, signal.SIGCONT)).start()

    def stats(self, queue: str) -> tuple[int, int] | None:
        return None


def count_left(port: int, queue: str, expect: int, silence: float) -> int:
    """How many messages ``queue`` still holds: read them at client ack without acknowledging
    (they stay), until ``expect`` came or nothing for ``silence`` seconds."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(encode(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})))
        sub = {"destination": queue, "id": "left", "ack": "client", "activemq.prefetchSize": "10000"}
        sock.sendall(encode(Frame("SUBSCRIBE", sub), "1.2"))
        parser, count = FrameParser(role="client", version="1.2"), 0
        sock.settimeout(silence)
        try:
            while count < expect:
                data = sock.recv(65536)
                if not data:
                    break
                count += sum(f.command == "MESSAGE" for f in parser.feed(data))
        except TimeoutError:
            pass
        sock.sendall(encode(Frame("DISCONNECT", {}), "1.2"))
    return count


def one_round(target: InProcess | Stopped, queue: str, a: argparse.Namespace) -> dict[str, Any]:
    produce(target.port, queue, a.messages, a.size, not a.non_persistent)
    idle, expect = (a.idle, 0) if a.stop == "idle" else (a.timeout, a.messages)
    with tempfile.TemporaryFile("w+") as stdout:
        perl = subprocess.Popen(
            ["perl", str(PERL), str(target.port), str(a.seconds), str(idle), queue, str(expect), str(a.grace)]
            + [str(a.stall_at if a.stall else -1)],
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert perl.stderr is not None and perl.stdin is not None
        errors = []
        for line in perl.stderr:  # the drainer says when to stall the broker
            if line.strip() == "stall":
                target.stall(a.stall)
                perl.stdin.write("go\n")  # the broker has stopped: the drainer goes on
                perl.stdin.flush()
            else:
                errors.append(line)
        perl.wait(600)
        stdout.seek(0)
        out = stdout.read()
    if perl.returncode != 0:
        raise SystemExit(f"leave_mid_stream.pl failed ({perl.returncode}): {''.join(errors)}{out}")
    seen = json.loads(out.strip().splitlines()[-1])
    names = [body.split(".")[0] for body in seen["acked"] + seen["drained"]]
    missing = sorted(set(f"m{i}" for i in range(a.messages)) - set(names), key=lambda n: int(n[1:]))
    left = count_left(target.port, queue, len(missing), 5.0) if missing else 0
    stats = target.stats(queue)
    at = seen["at"]
    last = at.get("last_drained", at["drain_subscribed"])
    lag = target.broker.lag if isinstance(target, InProcess) else None
    return {
        "queue": queue,
        "late": [[body.split(".")[0], round(t - last, 3)] for body, t in seen["late"]],
        "partial": seen["partial"],
        "longest_wait": [round(seen["gap"][0], 3), seen["gap"][1]],
        "gave_up": round(at["drain_idle"] - last, 3),
        "stalls": [
            [round(t - late - last, 3), round(late, 3)]
            for t, late in (lag.stalls if isinstance(lag, TimedLag) else [])
            if at["left"] - 1 <= t <= at["drain_left"] + 1
        ],
        "acked": len(seen["acked"]),
        "meanwhile": [b.split(".")[0] for b in seen["meanwhile"]],
        "drained": len(seen["drained"]),
        "duplicates": len(names) - len(set(names)),
        "missing": missing,
        "left": left,
        "lost": len(missing) - left,
        "dequeued": stats[0] if stats else None,
        "size": stats[1] if stats else None,
        "loop_stall_ms": round(lag.worst() * 1000) if lag else None,
    }


def _few(names: list[Any], n: int = 6) -> str:
    """A long list shown by its ends."""
    if len(names) <= 2 * n:
        return str(names)
    return f"{len(names)}: {names[:n]} ... {names[-n:]}"


def follow(trace: str, rounds: list[dict[str, Any]]) -> list[str]:
    """Where the broker last saw each missing or late message, from its trace."""
    wanted = {(r["queue"], name) for r in rounds for name in r["missing"] + [n for n, _ in r["late"]]}
    if not wanted:
        return []
    sent: dict[str, int] = defaultdict(int)
    ids: dict[str, tuple[str, str]] = {}  # message id -> (queue, name)
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    ended: dict[str, str] = {}
    with open(trace, encoding="utf-8") as lines:
        for line in lines:
            e = json.loads(line)
            kind = e["event"]
            if kind == "send":
                name = f"m{sent[e['dest']]}"
                sent[e["dest"]] += 1
                if (e["dest"], name) in wanted:
                    ids[e["msg"]] = (e["dest"], name)
            elif kind == "disconnect":
                ended[e["session"]] = f"{e['ts']:.3f} ({e['reason']})"
            elif e.get("msg") in ids and kind in ("dispatch", "ack", "redeliver", "discard", "dlq"):
                seen[ids[e["msg"]]].append(f"{kind} {e.get('session', '')} {e.get('mode', '')} at {e['ts']:.3f}")
    out = []
    for (queue, name), events in sorted(seen.items(), key=lambda kv: (kv[0][0], int(kv[0][1][1:]))):
        sessions = {ev.split()[1] for ev in events if ev.split()[1]}
        closes = ", ".join(f"{s} closed {ended.get(s, 'never')}" for s in sorted(sessions))
        out.append(f"{queue} {name}: " + "; ".join(events) + f"; {closes}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--size", type=int, default=100, help="body bytes after the message's name")
    ap.add_argument("--seconds", type=float, default=1.0, help="how long the slow consumer acknowledges")
    ap.add_argument(
        "--stop",
        choices=("count", "idle"),
        default="count",
        help="when the drainer stops: once it has every message (count), or after --idle s without one (idle)",
    )
    ap.add_argument("--idle", type=float, default=0.5, help="--stop idle: the silence that ends the drain")
    ap.add_argument("--timeout", type=float, default=30.0, help="--stop count: the silence that ends it anyway")
    ap.add_argument("--non-persistent", action="store_true")
    ap.add_argument("--grace", type=float, default=0.0, help="the drainer reads this long more, noting what came late")
    ap.add_argument("--trace", metavar="FILE", help="record the broker's trace in FILE and follow each missing message")
    ap.add_argument("--stall", type=float, default=0.0, help="stall the broker this many seconds in each drain")
    ap.add_argument("--stall-at", type=int, default=0, help="... once the drainer has this many messages")
    ap.add_argument("--activemq", action="store_true", help="run against ActiveMQ (bench/brokers.py) instead")
    a = ap.parse_args()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="leave-mid-stream-") as data:
        trace = "" if a.activemq or not a.trace else str(Path(a.trace).resolve())
        target: InProcess | Stopped
        if a.activemq:
            amq = ActiveMQ(Path(data))
            amq.start()
            assert amq.pid is not None
            target, stop = Stopped("ActiveMQ", amq.port, amq.pid), amq.stop
        else:
            config = load_config().on_free_ports()
            config = config.replace(
                transport={"host": "127.0.0.1"},
                broker={"data_dir": data, "trace": trace, "trace_writer_nice": 0, "trace_lag_limit": 0},
            )
            broker = LiveBroker(config, TimedLag())
            broker.start()
            target, stop = InProcess(broker), broker.stop
        try:
            for r in range(a.rounds):
                if isinstance(target, InProcess):
                    target.broker.lag.samples.clear()
                result = one_round(target, f"/queue/leave.{r}", a)
                rounds.append(result)
                stats = f", dequeued {result['dequeued']}, size {result['size']}" if result["size"] is not None else ""
                lag = result["loop_stall_ms"]
                print(
                    f"round {r}: acked {result['acked']} + drained {result['drained']}{stats}, missing "
                    f"{_few(result['missing'])}, of which {result['left']} still queued and {result['lost']} lost, "
                    f"duplicates {result['duplicates']}, left unacknowledged {result['meanwhile']}; "
                    + (f"the broker's loop stalled up to {lag} ms; " if lag is not None else "")
                    + f"the drainer waited up to {result['longest_wait'][0]} s, for its message "
                    f"{result['longest_wait'][1]}"
                    + (f"; late {_few(result['late'])}, gave up after {result['gave_up']} s" if result["late"] else "")
                    + (f", {result['partial']} bytes of a frame unread" if result["partial"] else "")
                    + (f"; stalls (from, s) {result['stalls']}" if result["missing"] or result["late"] else ""),
                    flush=True,
                )
        finally:
            stop()
        if trace:
            for line in follow(trace, rounds):
                print(line, flush=True)
    lost = sum(r["lost"] for r in rounds)
    print(
        json.dumps(
            {
                "bench": "leave_mid_stream",
                "broker": target.name,
                "rounds": len(rounds),
                "messages": a.messages,
                "size": a.size,
                "seconds": a.seconds,
                "stop": a.stop,
                "idle": a.idle if a.stop == "idle" else a.timeout,
                "stall": a.stall,
                "persistent": not a.non_persistent,
                "rounds_with_loss": sum(1 for r in rounds if r["lost"]),
                "missing": sum(len(r["missing"]) for r in rounds),
                "lost": lost,
                "late": sum(len(r["late"]) for r in rounds),
                "worst_loop_stall_ms": max((r["loop_stall_ms"] or 0 for r in rounds), default=0),
            }
        )
    )
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
