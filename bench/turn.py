"""Scenario D's round trip (or E's message) through the real server: the broker's cost per turn.

Scenario D (ack client-individual, prefetch 1) is a ping-pong: each ACK lets
the broker send the next MESSAGE, so D's rate is one round trip per message,
shared between the client's turn and the broker's. compare.py measures the
whole; this measures the broker's half alone, through its real sockets and
event loop (bench/cost.py measures the core without them):

1. a queue is filled with ``--messages`` 256-byte messages (plus a warm-up);
2. one consumer (a raw blocking socket: a cheap client) subscribes at
   client-individual, prefetch 1, and acknowledges each MESSAGE as it comes;
3. it prints the rate, the broker's CPU per turn (user and system, from
   ``/proc/PID/stat``) and, with ``--callgrind``, the broker's user-space
   instructions per turn, counted by valgrind over the measured turns only
   (``callgrind_control``): the same on every run, so two versions of the
   server can be compared to the percent. System time is the kernel's
   sending, receiving, sleeping and waking; no change to our Python reaches it.

``--scenario E`` measures E's path instead (E is paced, so nothing queues and
each message crosses the broker alone): a producer's SEND in (256 bytes and
E's three headers), its MESSAGE out to another connection's auto-ack
subscription, one message at a time. What the broker spends per message there
is what it adds to every message's latency.

``--floor`` runs the same exchange against a trivial asyncio server that
answers every read with one 400-byte frame (for E: writes it to the
subscriber's connection): what asyncio and the kernel cost per turn with no
broker at all.

``--loop asyncio --loop uvloop`` measures both on each event loop (``serve --loop``).

    python bench/turn.py [--messages 20000] [--scenario D|E] [--callgrind] [--floor] [--loop L ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Ours, free_port, port_open  # noqa: E402

_WARMUP = 500
_BODY = b"x" * 256
_FLOOR_SERVER = r"""
import asyncio, socket, sys
FRAME = b"MESSAGE\nack:1-1\n" + b"x" * 380 + b"\n\n\x00"
SUBSCRIBER = []
class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def data_received(self, data):
        if data.startswith(b"ACK"):
            self.transport.write(FRAME)
        elif data.startswith(b"SEND"):
            SUBSCRIBER[0].write(FRAME)
        elif data.startswith(b"SUBSCRIBE"):
            SUBSCRIBER[:] = [self.transport]
            self.transport.write(b"RECEIPT\nreceipt-id:subscribed\n\n\x00" if b"\nreceipt:" in data else FRAME)
        elif data.startswith(b"CONNECT"):
            self.transport.write(b"CONNECTED\nversion:1.2\n\n\x00")
async def main():
    await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
from minibroker import eventloop
eventloop.run(main(), sys.argv[2])
"""


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


class Consumer:
    """A blocking STOMP 1.2 client: fill a queue, then ACK one MESSAGE at a time."""

    def __init__(self, port: int, dest: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.dest = dest.encode()
        self.buf = b""
        self.sock.sendall(b"CONNECT\naccept-version:1.2\nhost:bench\n\n\x00")
        if not self.frame().startswith(b"CONNECTED"):
            raise SystemExit("the broker did not answer CONNECT with CONNECTED")

    def frame(self) -> bytes:
        """The next frame (headers and body), heart-beat EOLs skipped."""
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            nul = self.buf.find(b"\x00")
            if nul >= 0:
                frame, self.buf = self.buf[:nul], self.buf[nul + 1 :]
                return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise SystemExit("the broker closed the connection")
            self.buf += chunk

    def fill(self, n: int) -> None:
        send = b"SEND\ndestination:%s\ncontent-length:%d\n\n%s\x00" % (self.dest, len(_BODY), _BODY)
        self.sock.sendall(send * (n - 1) + send.replace(b"SEND\n", b"SEND\nreceipt:filled\n", 1))
        if not self.frame().startswith(b"RECEIPT"):
            raise SystemExit("the broker did not confirm the filled queue")

    def subscribe(self) -> bytes:
        """Subscribe; returns the first MESSAGE (not yet acknowledged)."""
        self.sock.sendall(
            b"SUBSCRIBE\nid:turn\ndestination:%s\nack:client-individual\nactivemq.prefetchSize:1\n\n\x00" % self.dest
        )
        return self.frame()

    def turns(self, message: bytes, n: int) -> bytes:
        """ACK ``message`` and the next n-1; returns the n-th MESSAGE, unacknowledged."""
        for _ in range(n):
            if not message.startswith(b"MESSAGE\n") or b"\nack:" not in message:
                raise SystemExit(f"expected a MESSAGE with an ack header, got: {message[:200]!r}")
            at = message.index(b"\nack:") + 5
            self.sock.sendall(b"ACK\nid:" + message[at : message.index(b"\n", at)] + b"\n\n\x00")
            message = self.frame()
        return message


class Relay:
    """E's path: a producer's SEND in, its MESSAGE out on another connection's
    auto-ack subscription, one message at a time."""

    def __init__(self, port: int, dest: str) -> None:
        self.consumer = Consumer(port, dest)
        self.consumer.sock.sendall(
            b"SUBSCRIBE\nid:turn\ndestination:%s\nack:auto\nreceipt:subscribed\n\n\x00" % dest.encode()
        )
        if not self.consumer.frame().startswith(b"RECEIPT"):
            raise SystemExit("the broker did not confirm the subscription")
        self.producer = Consumer(port, dest)
        self.dest = dest.encode()
        self.sent = 0

    def turns(self, n: int) -> None:
        """Send n messages, each once the one before it arrived."""
        for _ in range(n):
            self.sent += 1
            self.producer.sock.sendall(
                b"SEND\ndestination:%s\ncontent-length:%d\nbench-run:turn\nbench-seq:%d\nbench-ts:%d\n\n%s\x00"
                % (self.dest, len(_BODY), self.sent, time.monotonic_ns(), _BODY)
            )
            message = self.consumer.frame()
            if not message.startswith(b"MESSAGE\n"):
                raise SystemExit(f"expected a MESSAGE, got: {message[:200]!r}")


def callgrind(pid: int, command: str) -> None:
    subprocess.run(["callgrind_control", command, str(pid)], check=True, capture_output=True, timeout=300)


def measure(
    port: int, pid: int, n: int, dump_dir: Path | None, fill: bool = True, scenario: str = "D"
) -> dict[str, float]:
    """Fill, warm up, then time ``n`` turns (counting instructions when ``dump_dir`` is given)."""
    if scenario == "E":
        relay = Relay(port, "/queue/turn")
        turns = relay.turns
        sockets = [relay.consumer.sock, relay.producer.sock]
    else:
        consumer = Consumer(port, "/queue/turn")
        sockets = [consumer.sock]
        if fill:
            consumer.fill(n + _WARMUP + 1)
        message = consumer.subscribe()

        def turns(count: int) -> None:
            nonlocal message
            message = consumer.turns(message, count)

    if dump_dir is not None:
        callgrind(pid, "--instr=on")
    turns(_WARMUP)
    if dump_dir is not None:
        callgrind(pid, "--zero")
    user0, sys0 = cpu_seconds(pid)
    started = time.perf_counter()
    turns(n)
    elapsed = time.perf_counter() - started
    user1, sys1 = cpu_seconds(pid)
    result = {"rate": n / elapsed, "user_us": (user1 - user0) / n * 1e6, "sys_us": (sys1 - sys0) / n * 1e6}
    if dump_dir is not None:
        callgrind(pid, "--dump")
        result["instructions"] = _dumped_instructions(dump_dir) / n
    for sock in sockets:
        sock.close()
    return result


def _dumped_instructions(dump_dir: Path) -> int:
    dumps = sorted(dump_dir.glob("cg.*.*"), key=lambda p: p.stat().st_mtime)
    for line in dumps[-1].read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no instruction count in {dumps[-1]}")


def _measure_server(
    name: str, argv: list[str], port: int, args: argparse.Namespace, tmp: Path, fill: bool
) -> dict[str, float]:
    """Start ``argv`` (listening on ``port``), measure it, stop it."""
    dump_dir = tmp / name.replace(" ", "-")
    dump_dir.mkdir()
    if args.callgrind:
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={dump_dir}/cg.%p", *argv]
    with open(dump_dir / "server.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while not port_open(port):
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit(f"{name} did not start: see {dump_dir / 'server.log'}")
            time.sleep(0.1)
        return measure(port, proc.pid, args.messages, dump_dir if args.callgrind else None, fill, args.scenario)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(args: argparse.Namespace, tmp: Path) -> list[tuple[str, dict[str, float]]]:
    results = []
    for loop in args.loop or ["auto"]:
        label = "" if args.loop is None else f" ({loop})"
        port = free_port()
        argv = Ours.command() + [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--websocket-port",
            "0",
            "--console-port",
            "0",
            "--loop",
            loop,
            "--data-dir",
            str(tmp / f"data-{loop}"),
            "--log-level",
            "warning",
        ]
        name = f"minibroker{label}"
        results.append((name, _measure_server(name, argv, port, args, tmp, fill=True)))
        if args.floor:
            port = free_port()
            argv = [sys.executable, "-c", _FLOOR_SERVER, str(port), loop]
            name = f"asyncio floor{label}"
            results.append((name, _measure_server(name, argv, port, args, tmp, fill=False)))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000, help="measured turns (default %(default)s)")
    ap.add_argument(
        "--scenario",
        choices=("D", "E"),
        default="D",
        help="D: an ACK in, the next MESSAGE out (default); E: a SEND in, its MESSAGE out to another connection",
    )
    ap.add_argument("--callgrind", action="store_true", help="count the broker's instructions with valgrind")
    ap.add_argument("--floor", action="store_true", help="also measure a trivial asyncio server")
    ap.add_argument(
        "--loop",
        action="append",
        choices=("auto", "asyncio", "uvloop"),
        help="the event loop of the broker (and of the floor server); repeat to measure each "
        "(default: auto, uvloop when installed)",
    )
    a = ap.parse_args(argv)
    if a.messages < 1:
        ap.error(f"--messages must be at least 1, not {a.messages}")
    if a.callgrind and (shutil.which("valgrind") is None or shutil.which("callgrind_control") is None):
        ap.error("--callgrind needs valgrind (apt-get install -y valgrind)")
    with tempfile.TemporaryDirectory(prefix="minibroker-turn-") as tmp:
        results = run(a, Path(tmp))
    if a.scenario == "E":
        print(f"# scenario E's message (SEND in, its MESSAGE out, ack auto), {a.messages:,} messages, one at a time")
    else:
        print(f"# scenario D's turn (ACK in, next MESSAGE out), {a.messages:,} turns, one raw-socket consumer")
    print(
        "| server | turns/s | user CPU us/turn | system CPU us/turn |" + (" instructions/turn |" if a.callgrind else "")
    )
    print("|---|---|---|---|" + ("---|" if a.callgrind else ""))
    for name, r in results:
        row = f"| {name} | {r['rate']:,.0f} | {r['user_us']:.1f} | {r['sys_us']:.1f} |"
        if a.callgrind:
            row += f" {r['instructions']:,.0f} |" if "instructions" in r else " |"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
