"""Write a synthetic broker trace of N events, for benchmarks of the analysis.

    python -m clients.spark.synth --events 1000000 --out /tmp/trace-1m.jsonl
    python -m clients.spark.synth --events 1000000 --out /tmp/trace-1m.jsonl --parquet   # and its twin

Round-robin producers send to a few queues at a steady rate; each message is
sent, enqueued, dispatched and acked (four events), with usage events on
change. Halfway through, one queue loses its consumer for a while and memory
climbs to the high-water mark while another queue's consumer starves, so the
detectors have work to do. Uses the real writer (``minibroker.trace.Trace``)
on a virtual clock, and reports the writer's cost per event. ``--parquet``
also writes the trace's Parquet twin (``OUT.parquet/``, the segments the
broker's writer process makes with ``broker.trace_format = "both"``) from the
JSON lines, with ``minibroker.trace.parquet.convert_file``.
"""

from __future__ import annotations

import argparse
import sys
import time

from minibroker.trace import Trace

__all__ = ["synthesize", "main"]


def synthesize(path: str, events: int, *, rate: float = 1000.0, queues: int = 4) -> dict:
    clock = [0.0]
    trace = Trace(path, lambda: clock[0], broker="synth")
    emit = trace.emit
    emit("usage", mem_pct=0, store_pct=0, temp_pct=0)
    for q in range(queues):
        emit("connect", session=f"c{q}", client_id=f"consumer-{q}")
        emit("subscribe", session=f"c{q}", sub="0", dest=f"/queue/Q{q}", ack="client-individual", prefetch=100)
    n_msgs = max(1, events // 4)
    stall = range(n_msgs // 2, n_msgs // 2 + n_msgs // 8)  # Q0's consumer stops acking
    held: list[str] = []
    mem = 0
    started = time.perf_counter()
    for i in range(n_msgs):
        clock[0] = i / rate
        dest = f"/queue/Q{i % queues}"
        msg = f"ID:synth-{i}"
        emit("send", session="p", dest=dest, msg=msg, size=1024, persistent=True, priority=4)
        emit("enqueue", dest=dest, msg=msg, size=1024, persistent=True, priority=4, cached=True)
        if i in stall and i % queues == 0:
            held.append(msg)
            pct = min(70, len(held) * 70 // max(1, len(stall) // (2 * queues)))
            if pct != mem:
                mem = pct
                emit("usage", mem_pct=mem, store_pct=1, temp_pct=0, dest=dest, dest_mem_pct=mem)
            continue
        if i in stall and i % queues == 1 and mem >= 70:
            emit("page_in_blocked", dest=dest, pending=1, mem_pct=mem, dest_mem_pct=0, hwm=70)
            continue  # Q1 starves while Q0 holds the memory
        sess = f"c{i % queues}"
        emit("dispatch", session=sess, sub="0", dest=dest, msg=msg, size=1024)
        emit("ack", session=sess, sub="0", dest=dest, msg=msg, mode="client-individual")
        if held and i > stall.stop:
            for h in held:
                emit("dispatch", session="c0", sub="0", dest="/queue/Q0", msg=h, size=1024)
                emit("ack", session="c0", sub="0", dest="/queue/Q0", msg=h)
            held.clear()
            mem = 0
            emit("usage", mem_pct=0, store_pct=1, temp_pct=0, dest="/queue/Q0", dest_mem_pct=0)
    trace.close()
    seconds = time.perf_counter() - started
    return {"events": trace.written, "seconds": seconds, "us_per_event": seconds / trace.written * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per virtual second")
    parser.add_argument("--out", required=True)
    parser.add_argument("--parquet", action="store_true", help="also write the Parquet twin, OUT.parquet/")
    args = parser.parse_args(argv)
    r = synthesize(args.out, args.events, rate=args.rate)
    print(
        f"{r['events']} events in {r['seconds']:.1f} s "
        f"({r['us_per_event']:.2f} us per event, writer included) -> {args.out}"
    )
    if args.parquet:
        from minibroker.trace.parquet import convert_file
        from minibroker.trace.segments import segment_files, twin_dir

        started = time.perf_counter()
        rows = convert_file(args.out, twin_dir(args.out))
        print(
            f"{rows} events as {len(segment_files(twin_dir(args.out)))} Parquet segment(s) "
            f"in {time.perf_counter() - started:.1f} s -> {twin_dir(args.out)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
