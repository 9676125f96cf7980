"""Measure the journal: append rate, group commit, recovery time (prints, asserts nothing).

Run it as a module or by path::

    .venv/bin/python -m storage.bench_journal                 # 1M records
    .venv/bin/python -m storage.bench_journal --records 200000 --dir /tmp/b

Sections:

appends      enqueue N records of ``--payload`` bytes, no fsync (the broker's
             synchronous cost per persistent message)
pairs        enqueue then dequeue, N/2 times
sync/msg     one fsync per message (fsync "always" without group commit)
group        the owner thread appends while another thread calls ``sync()`` in
             a loop, as the broker does: messages/s made durable, fsyncs/s
recovery     ``Journal.open`` of the N-record journal written by "appends",
             then of the same journal with half the messages dequeued
threshold    the enqueue threshold at Qpid's default ring sizes: messages through before
             the enqueue threshold refuses, and how many are live
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from storage.errors import EnqueueThresholdExceeded
from storage.journal import Journal
from storage.model import JournalConfig

__all__ = ["main"]


def _rate(label: str, count: int, seconds: float, unit: str = "records") -> None:
    print(f"{label:<12} {count:>9} {unit} in {seconds:7.3f} s = {count / seconds:>10,.0f} {unit}/s")


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def bench_appends(directory: Path, records: int, payload: bytes) -> JournalConfig:
    config = JournalConfig(directory=directory / "appends", layout="growing")
    j = Journal.open(config)
    enqueue = j.enqueue
    seconds = _timed(lambda: [enqueue(b"queue://orders", payload) for _ in range(records)])
    j.close()
    _rate("appends", records, seconds)
    return config


def bench_pairs(directory: Path, records: int, payload: bytes) -> None:
    j = Journal.open(JournalConfig(directory=directory / "pairs", layout="growing"))

    def run() -> None:
        for _ in range(records // 2):
            j.dequeue(j.enqueue(b"queue://orders", payload).seq)

    _rate("pairs", records, _timed(run))
    j.close()


def bench_sync_each(directory: Path, messages: int, payload: bytes) -> None:
    j = Journal.open(JournalConfig(directory=directory / "sync-each", layout="growing"))

    def run() -> None:
        for _ in range(messages):
            j.enqueue(b"queue://orders", payload)
            j.sync()

    _rate("sync/msg", messages, _timed(run), "msgs")
    j.close()


def bench_group_commit(directory: Path, messages: int, payload: bytes) -> None:
    j = Journal.open(JournalConfig(directory=directory / "group", layout="growing"))
    done = threading.Event()
    fsyncs = 0

    def syncer() -> None:
        nonlocal fsyncs
        durable = 0
        while not done.is_set() or durable < j.last_seq:
            seq = j.sync()
            if seq > durable:
                durable, fsyncs = seq, fsyncs + 1

    thread = threading.Thread(target=syncer)
    start = time.perf_counter()
    thread.start()
    for _ in range(messages):
        j.enqueue(b"queue://orders", payload)
    done.set()
    thread.join()
    seconds = time.perf_counter() - start
    _rate("group", messages, seconds, "msgs")
    print(f"{'':<12} {fsyncs} fsyncs, {messages / max(fsyncs, 1):.0f} messages per fsync")
    j.close()


def bench_recovery(config: JournalConfig, records: int) -> None:
    opened: list[Journal] = []
    seconds = _timed(lambda: opened.append(Journal.open(config)))
    j = opened[0]
    _rate("recovery", records, seconds)
    print(f"{'':<12} {len(j.files())} files, {j.live_count} live, {j.disk_usage():,} bytes")
    for rec in list(j.recovered(payloads=False))[::2]:
        j.dequeue(rec.seq)
    j.close()
    total = records + records // 2
    seconds = _timed(lambda: opened.append(Journal.open(config)))
    _rate("recovery", total, seconds)
    print(f"{'':<12} (with every other message dequeued: {opened[1].live_count} live)")
    opened[1].close()


def bench_threshold(directory: Path) -> None:
    j = Journal.open(JournalConfig(directory=directory / "Durable", layout="ring", name="Durable"))
    pin, ordinary, sent = b"P" * 200, b"o" * 200, 0
    start = time.perf_counter()
    try:
        for _ in range(6):
            j.enqueue(b"Durable", pin)
            first = j.current_file_id
            while j.current_file_id == first:
                j.dequeue(j.enqueue(b"Durable", ordinary).seq)
                sent += 1
        j.enqueue(b"Durable", pin)
        while True:
            j.dequeue(j.enqueue(b"Durable", ordinary).seq)
            sent += 1
    except EnqueueThresholdExceeded as refused:
        seconds = time.perf_counter() - start
        print(f"threshold    {sent} messages through, then: {refused}")
        print(f"{'':<12} {j.live_count} live, {j.last_seq} records, {seconds:.2f} s")
    j.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=100, help="payload bytes")
    parser.add_argument("--fsyncs", type=int, default=2000, help="messages for sync/msg")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="bench-journal-", dir=args.dir))
    payload = bytes(args.payload)
    try:
        config = bench_appends(directory, args.records, payload)
        bench_pairs(directory, min(args.records, 400_000), payload)
        bench_sync_each(directory, args.fsyncs, payload)
        bench_group_commit(directory, min(args.records, 200_000), payload)
        bench_recovery(config, args.records)
        bench_threshold(directory)
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
