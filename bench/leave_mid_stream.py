#!/usr/bin/env python3
"""Does a slow STOMP 1.0 client-ack consumer that leaves mid-stream lose a message?

Each round fills a queue with N messages, runs ``leave_mid_stream.pl`` (Perl's
Net::Stomp: client ack, prefetch 1, a 4 kB receive buffer, 20 ms before each ACK;
after SECONDS a topic subscription with a receipt, one queue MESSAGE left
unacknowledged, DISCONNECT; then a drainer at auto ack and prefetch 500 that
stops after IDLE seconds without a frame) and compares what the clients got
(acknowledged plus drained, by body) with the queue's statistics (dequeued,
size). A lost message is one the queue counts dequeued that neither client got.
Prints one line per round and a JSON summary; needs Net::Stomp (`make net-stomp`).

    python bench/leave_mid_stream.py --rounds 20 [--messages 5000] [--size 100]
        [--seconds 1] [--idle 0.5] [--non-persistent]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from clients.labs.runner import LiveBroker
from minibroker.codec import FrameParser, encode
from minibroker.config import load_config
from minibroker.frames import Frame

PERL = Path(__file__).with_suffix(".pl")


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


def one_round(broker: LiveBroker, queue: str, a: argparse.Namespace) -> dict[str, Any]:
    produce(broker.port, queue, a.messages, a.size, not a.non_persistent)
    run = subprocess.run(
        ["perl", str(PERL), str(broker.port), str(a.seconds), str(a.idle), queue],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    names = [body.split(".")[0] for body in seen["acked"] + seen["drained"]]
    dest = broker.server.broker.destinations[queue]
    missing = sorted(set(f"m{i}" for i in range(a.messages)) - set(names), key=lambda n: int(n[1:]))
    return {
        "acked": len(seen["acked"]),
        "meanwhile": [b.split(".")[0] for b in seen["meanwhile"]],
        "drained": len(seen["drained"]),
        "duplicates": len(names) - len(set(names)),
        "missing": missing,
        "dequeued": dest.dequeued,
        "size": dest.size(),
        "loop_stall_ms": round(broker.lag.worst() * 1000),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--size", type=int, default=100, help="body bytes after the message's name")
    ap.add_argument("--seconds", type=float, default=1.0, help="how long the slow consumer acknowledges")
    ap.add_argument("--idle", type=float, default=0.5, help="the drainer stops after this long without a frame")
    ap.add_argument("--non-persistent", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="leave-mid-stream-") as data:
        config = load_config().on_free_ports().replace(transport={"host": "127.0.0.1"}, broker={"data_dir": data})
        broker = LiveBroker(config)
        broker.start()
        rounds: list[dict[str, Any]] = []
        try:
            for r in range(a.rounds):
                broker.lag.samples.clear()
                result = one_round(broker, f"/queue/leave.{r}", a)
                rounds.append(result)
                print(
                    f"round {r}: acked {result['acked']} + drained {result['drained']}, dequeued "
                    f"{result['dequeued']}, size {result['size']}, missing {result['missing']}, "
                    f"duplicates {result['duplicates']}, left unacknowledged {result['meanwhile']}, "
                    f"the broker's loop stalled up to {result['loop_stall_ms']} ms",
                    flush=True,
                )
        finally:
            broker.stop()
    lost = sum(len(r["missing"]) for r in rounds)
    print(
        json.dumps(
            {
                "bench": "leave_mid_stream",
                "rounds": len(rounds),
                "messages": a.messages,
                "size": a.size,
                "seconds": a.seconds,
                "idle": a.idle,
                "persistent": not a.non_persistent,
                "rounds_with_loss": sum(1 for r in rounds if r["missing"]),
                "lost": lost,
                "worst_loop_stall_ms": max((r["loop_stall_ms"] for r in rounds), default=0),
            }
        )
    )
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
