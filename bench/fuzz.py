#!/usr/bin/env python3
"""The fuzzer, run long: N generated frames against the core, checked after every connection.

The frames come from the fuzz tests' own generator (``tests/core/test_core_fuzz.py``:
STOMP's commands with good, edge and garbage header values, plus raw bytes),
so this bench follows it as it learns new shapes: a pool of ``--pool`` chunks
is drawn from it once (drawing costs milliseconds a chunk), and connections
are random sequences of them, a fraction damaged at random (a flipped bit, a
cut, a stray NUL or newline, a doubling). One broker core on the
virtual network takes connection after connection (a fresh broker every
``--per-broker`` connections, half of them with a journal); each connection
CONNECTs, sends a generated list of frames and is closed by the broker (an
ERROR) or by its peer. After each connection ends:

- ``internal errors``: the core raised while handling it (counted, and the
  connection closed as the server would) or answered with an ERROR saying
  "internal error";
- ``ERROR without message``: an ERROR frame with no ``message`` header;
- ``invariant breaks``: the connection left something behind, as the core's
  own checker of connection ends finds it (``minibroker.core.invariants``, run by
  the virtual network after every close: no subscription, consumer,
  transaction, flow-control wait, temporary destination or client-id left,
  every unacknowledged message back on its queue);
- a bystander client still sends and receives on the same broker (every
  100 connections).

Each broker's connections come from a random generator of their own (seeded
by ``--seed`` and the broker's number), and every example of a failure names
its broker, so ``--broker K`` (with the same seed and sizes) replays that
broker's whole history alone. Prints a table and leaves JSON under
bench/results/::

    .venv/bin/python bench/fuzz.py [--frames 1000000] [--seed 1] [--broker K]
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from report import print_table, save

from minibroker.config import parse_config
from minibroker.edge import VirtualNetwork
from minibroker.frames import Frame
from minibroker.protocol import encode

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "core"), str(ROOT / "tests")]
from test_core_fuzz import chunk  # noqa: E402  (the fuzz tests' generator)

#: The bystander sends and receives after this many connections (and at each broker's end).
BYSTANDER_EVERY = 100


class Fuzzer:
    """Connections of generated frames against a series of broker cores."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}
        self.net: VirtualNetwork | None = None
        self.data_dir: str | None = None
        self.bystander: Any = None
        self.violations_seen = 0
        self.index = self.on_broker = 0

    def _note(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        bucket = self.examples.setdefault(kind, [])
        if len(bucket) < 5:
            bucket.append(example[:6000])

    # -- brokers
    def start_broker(self, index: int) -> None:
        """Broker core number ``index`` (every other one with a journal), after the last one ends."""
        self._end_broker()
        journal = index % 2 == 1
        self.index, self.on_broker = index, 0
        self.counts["brokers"] += 1
        # Each destination has a small limit of its own, so the fuzzers' backlogs block
        # their own producers and never the broker's memory (the bystander's).
        doc: dict[str, Any] = {
            "system_usage": {"memory_limit": "64 mb"},
            "destination_policy": [{"queue": ">", "memory_limit": "32 kb"}, {"topic": ">", "memory_limit": "32 kb"}],
        }
        if journal:
            self.data_dir = tempfile.mkdtemp(prefix="minibroker-fuzz-")
            doc["store"] = {"fsync": "never", "journal_max_file_length": "64 kb"}
        self.net = VirtualNetwork(parse_config(doc), data_dir=self.data_dir, seed=index + 1, check_teardown=True)
        self.violations_seen = 0
        self.bystander = self.net.connected_client("bystander")
        self.bystander.subscribe("/queue/ok", "b", "client-individual")

    def _end_broker(self) -> None:
        if self.net is not None:
            self._check_bystander()
            try:
                self.net.stop()
            except Exception:
                self._note("internal errors", "stopping the broker: " + traceback.format_exc(limit=3))
            self._note_violations("at the broker's shutdown")
            assert self.net.teardown is not None
            self.counts["connection ends checked"] += self.net.teardown.checked
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.net, self.data_dir = None, None

    def _check_bystander(self) -> None:
        assert self.net is not None
        b = self.bystander
        self.counts["bystander checks"] += 1
        try:
            b.send("/queue/ok", "still here", persistent="true" if self.data_dir else "false")
            if b.closed or b.bodies()[-1:] != [b"still here"]:
                self._note("bystander hurt", repr(b.frames()[-3:]))
                return
            b.ack(b.messages()[-1])
            b.received.clear()
        except Exception:
            self._note("bystander hurt", traceback.format_exc(limit=3))

    # -- one connection
    def connection(self, version: str, chunks: list[bytes]) -> None:
        assert self.net is not None, "start_broker first"
        if self.on_broker and self.on_broker % BYSTANDER_EVERY == 0:
            self._check_bystander()
        self.counts["connections"] += 1
        self.on_broker += 1
        where = f"broker {self.index}, its connection {self.on_broker}, STOMP {version}"
        client = self.net.client("fuzz")
        sid = client.sid
        client.send_raw(encode(Frame("CONNECT", {"accept-version": version, "host": "h"})))
        for data in chunks:
            if client.closed:
                break
            self.counts["frames"] += 1
            try:
                client.write(data)
            except Exception:
                self._note(
                    "internal errors",
                    f"{where}: raised at chunk {chunks.index(data)} of {chunks!r}\n{traceback.format_exc()}",
                )
                self.net.broker.internal_error(sid)  # as the server does: an ERROR, and the connection is closed
                self.net.pump()
                client.received = [f for f in client.received if f.command != "ERROR"]  # that ERROR is ours
                break
            self.net.advance(0.05)
        if not client.closed:
            client.closed = True
            try:
                self.net.broker.connection_lost(sid)
                self.net.pump()
            except Exception:
                self._note("internal errors", f"{where}: closing after {chunks!r}\n{traceback.format_exc()}")
        for error in client.frames("ERROR"):
            message = error.headers.get("message")
            if not message:
                self._note("ERROR without message", repr(error))
            elif "internal error" in message:
                self._note("internal errors", f"{where}: ERROR {message!r} after {chunks!r}")
        self._note_violations(f"({where}) after {chunks!r}")
        self.net.clients.pop(sid, None)

    def _note_violations(self, context: str) -> None:
        """Count what the checker found since the last look."""
        assert self.net is not None and self.net.teardown is not None
        violations = self.net.teardown.violations
        for broken in violations[self.violations_seen :]:
            self._note("invariant breaks", f"{broken} {context}")
        self.violations_seen = len(violations)

    def finish(self) -> None:
        self._end_broker()


def generate_pool(size: int, seed_value: int) -> list[bytes]:
    """``size`` chunks from the fuzz tests' generator (drawing is what costs: done once)."""
    pool: list[bytes] = []

    @seed(seed_value)
    @settings(
        max_examples=max(1, size // 20),
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(chunk(), min_size=20, max_size=20))
    def draw(chunks: list[bytes]) -> None:
        pool.extend(chunks)

    draw()
    return pool[:size]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One random damage to a chunk: a flipped byte, a cut, a stray NUL or newline, a doubling."""
    if not data:
        return bytes([rng.randrange(256)])
    at = rng.randrange(len(data))
    kind = rng.randrange(5)
    if kind == 0:
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    if kind == 1:
        return data[:at]
    if kind == 2:
        return data[:at] + rng.choice((b"\x00", b"\n", b"\r\n", b":")) + data[at:]
    if kind == 3:
        return data + data
    return data[at:]


def connection_chunks(rng: random.Random, pool: list[bytes], mutated: float) -> list[bytes]:
    """A connection's worth: 1 to 20 chunks of the pool, a fraction ``mutated`` of them damaged."""
    chunks = [rng.choice(pool) for _ in range(rng.randint(1, 20))]
    return [mutate(rng, c) if rng.random() < mutated else c for c in chunks]


def run(
    frames: int, seed_value: int, per_broker: int, pool_size: int, mutated: float, only_broker: int | None = None
) -> dict:
    started = time.monotonic()
    pool = generate_pool(pool_size, seed_value)
    pool_seconds = time.monotonic() - started
    fuzzer = Fuzzer()
    versions = ("1.0", "1.1", "1.2")
    index = 0 if only_broker is None else only_broker
    while fuzzer.counts["frames"] < frames:
        # Each broker's connections come from a generator of their own, so that
        # --broker replays one broker's history alone.
        rng = random.Random(f"{seed_value}/{index}")
        fuzzer.start_broker(index)
        for _ in range(per_broker):
            fuzzer.connection(rng.choice(versions), connection_chunks(rng, pool, mutated))
            if fuzzer.counts["frames"] >= frames and only_broker is None:
                break
        if only_broker is not None:
            break
        index += 1
    fuzzer.finish()
    seconds = time.monotonic() - started
    c = fuzzer.counts
    return {
        "frames": c["frames"],
        "connections": c["connections"],
        "brokers": c["brokers"],
        "seed": seed_value,
        "pool": len(pool),
        "pool_seconds": round(pool_seconds, 1),
        "mutated": mutated,
        "internal_errors": c["internal errors"],
        "errors_without_message": c["ERROR without message"],
        "invariant_breaks": c["invariant breaks"],
        "bystander_hurt": c["bystander hurt"],
        "bystander_checks": c["bystander checks"],
        "connection_ends_checked": c["connection ends checked"],
        "examples": fuzzer.examples,
        "seconds": round(seconds, 1),
        "frames_per_s": round(c["frames"] / seconds) if seconds else 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="generated frames to send (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-broker", type=int, default=2000, help="connections per broker core (default 2000)")
    parser.add_argument("--pool", type=int, default=4000, help="chunks drawn from the generator (default 4000)")
    parser.add_argument("--mutated", type=float, default=0.2, help="fraction of chunks damaged at random (default 0.2)")
    parser.add_argument(
        "--broker",
        type=int,
        metavar="K",
        help="replay broker K alone (its connections, as in a run with the same seed and sizes)",
    )
    parser.add_argument("--json", help="write the JSON here instead of bench/results/")
    a = parser.parse_args(argv)
    if a.frames < 1 or a.per_broker < 1 or a.pool < 1 or not 0 <= a.mutated <= 1:
        parser.error("--frames, --per-broker and --pool must be at least 1, --mutated within 0..1")
    logging.disable(logging.CRITICAL)  # the broker logs every refusal; the counts say what matters
    r = run(a.frames, a.seed, a.per_broker, a.pool, a.mutated, a.broker)
    print_table(
        [
            "frames",
            "connections",
            "internal errors",
            "ERROR without message",
            "invariant breaks",
            "bystander hurt",
            "frames/s",
            "s",
        ],
        [
            [
                r["frames"],
                r["connections"],
                r["internal_errors"],
                r["errors_without_message"],
                r["invariant_breaks"],
                r["bystander_hurt"],
                r["frames_per_s"],
                r["seconds"],
            ]
        ],
    )
    for kind, examples in r["examples"].items():
        print(f"\n{kind}, first of them:\n  " + "\n  ".join(e.splitlines()[0] for e in examples))
    save("fuzz", r, a.json)
    bad = r["internal_errors"] or r["errors_without_message"] or r["invariant_breaks"] or r["bystander_hurt"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
