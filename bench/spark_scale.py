#!/usr/bin/env python3
"""The Spark jobs at ten million, beside a plain Python parse of the same trace.

The goals: ``minibroker analyze`` of a 10M-event trace takes no longer than a
plain single-process loop that only parses the trace's JSON lines, and
``minibroker workload generate`` of 10M actions at most half that. This
measures them in the same minutes, one after the other, and prints the
ratios to the parse:

1. make the trace, JSON lines and its Parquet twin (``python -m
   clients.spark.synth --events N --parquet``), unless ``--trace FILE`` names
   one already made (its twin, ``FILE.parquet/``, is made when missing);
2. ``parse``: a fresh Python process runs ``json.loads`` on every line of the
   JSON lines: the yardstick;
3. ``analyze``: ``minibroker analyze TWIN --out DIR --engine spark``, the same
   events read from the Parquet segments (``--analyze-from jsonl``: from the
   JSON lines, as before the trace had a Parquet form);
4. ``workload``: ``minibroker workload generate WORKLOAD.toml --scale S --out DIR``
   (``examples/workloads/load-1m.toml``: 1M actions per unit of scale), as a
   user runs it: ``--engine auto``, on one machine the in-process engine
   (numpy and pyarrow, no JVM);
5. ``workload-spark``: the same with ``--engine spark``, the Spark job (the
   engine of a cluster), for the record: the same table, no goal of its own.

The table's ``input`` column says what each job read.

Each is a whole process (the JVM's start is the user's cost too), timed by
the wall clock, with its CPU seconds (user + system of the process tree, the
JVM included) beside. ``--reps N`` runs them all N times, interleaved, and
takes the medians; the ratios are those of the medians. The machine's load
average is printed with the table: on a shared machine absolute times move
by 20-40%, the ratios measured in the same minutes much less.

    .venv/bin/python bench/spark_scale.py                       # 10M events, 10M actions, one rep
    .venv/bin/python -m clients.spark.synth --events 10000000 --out /tmp/spark-bench/trace-10m.jsonl --parquet
    .venv/bin/python bench/spark_scale.py --trace /tmp/spark-bench/trace-10m.jsonl --reps 3
    .venv/bin/python bench/spark_scale.py --events 20000 --scale 0.02 --json out.json   # smoke

The table goes to stdout, the record (every rep, the medians, the ratios, the
command, date and commit) as JSON to ``bench/results/`` or ``--json FILE``.
Exit status 0 when every job succeeded, 1 otherwise (the failing job's
output is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from report import print_table, save

from minibroker.trace.segments import segment_files, twin_dir

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "examples" / "workloads" / "load-1m.toml"
JOBS = ("parse", "analyze", "workload", "workload-spark")
CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE = 0.5  # seconds between samples of a job's CPU

# The baseline: the plainest single-process parse of the trace, nothing kept.
PARSE = """\
import json, sys
loads = json.loads
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        loads(line)
        n += 1
print(n)
"""


class JobFailed(Exception):
    """A measured process exited non-zero; the message holds its output's tail."""


def _tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Record the CPU seconds (user + system) so far of ``root`` and its descendants."""
    parents: dict[int, int] = {}
    ticks: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        ticks[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    for pid, cpu in ticks.items():
        p = pid
        while p > 1 and p != root:
            p = parents.get(p, 0)
        if p == root:
            seen[pid] = max(seen.get(pid, 0.0), cpu)


def timed(name: str, argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` to completion: wall seconds, and the CPU seconds of its process
    tree (sampled from /proc every ``SAMPLE`` s, so the JVM a job starts counts too:
    os.times does not see a grandchild nobody waited for; the last moments of a
    process are missed, so the figure is a little low; at least what os.times
    counts for the processes waited for)."""
    before = os.times()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE):
            _tree_cpu(proc.pid, seen)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-20:])
        raise JobFailed(f"{name} exited {proc.returncode}: {' '.join(argv)}\n{tail}")
    after = os.times()
    # what the waited-for processes used, exactly: a job shorter than SAMPLE has no sample
    waited = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    cpu = max(sum(seen.values()), waited)
    return {"job": name, "seconds": wall, "cpu": cpu, "output": out.strip().splitlines()[-1:] or [""]}


def minibroker(*args: str) -> list[str]:
    """The ``minibroker`` command installed beside this Python (the venv's)."""
    return [str(Path(sys.executable).parent / "minibroker"), *args]


def synthesize(path: Path, events: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "clients.spark.synth", "--events", str(events), "--out", str(path), "--parquet"]
    return timed("synth", argv)


def make_twin(trace: Path) -> dict[str, Any]:
    """Write the Parquet twin of a JSON-lines trace (what synth --parquet does)."""
    code = "import sys; from minibroker.trace.parquet import convert_file as c; print(c(sys.argv[1], sys.argv[2]))"
    return timed("twin", [sys.executable, "-c", code, str(trace), twin_dir(trace)])


def inputs(trace: Path, analyze_from: str) -> dict[str, str]:
    """What each job reads, as the table says it."""
    twin = Path(twin_dir(trace))
    segments = segment_files(twin)
    mb = sum(p.stat().st_size for p in segments) / 1e6
    parquet = f"Parquet, {len(segments)} segment(s), {mb:,.0f} MB"
    jsonl = f"JSON lines, {trace.stat().st_size / 1e6:,.0f} MB"
    return {
        "parse": jsonl,
        "analyze": parquet if analyze_from == "parquet" else jsonl,
        "workload": "workload file (engine auto: {engine})",
        "workload-spark": "workload file (engine {engine})",
    }


def one_rep(
    trace: Path,
    work: Path,
    workload: Path,
    scale: float,
    analyze_args: list[str],
    workload_args: list[str],
    analyze_from: str = "parquet",
) -> list[dict[str, Any]]:
    """parse, analyze, workload, workload-spark: one after the other, outputs removed after each."""
    results = [timed("parse", [sys.executable, "-c", PARSE, str(trace)])]
    out = work / "analysis"
    source = twin_dir(trace) if analyze_from == "parquet" else str(trace)
    argv = ["analyze", source, "--out", str(out), "--engine", "spark", "--input-format", analyze_from]
    results.append(timed("analyze", minibroker(*argv, *analyze_args)))
    shutil.rmtree(out, ignore_errors=True)
    for job, engine in (("workload", []), ("workload-spark", ["--engine", "spark"])):
        out = work / job
        argv = ["workload", "generate", str(workload), "--scale", f"{scale:g}", "--out", str(out)]
        results.append(timed(job, minibroker(*argv, *engine, *workload_args)))
        summary = json.loads((out / "summary.json").read_text())
        results[-1]["actions"] = summary["rows"]
        results[-1]["engine"] = summary["engine"]
        shutil.rmtree(out, ignore_errors=True)
    return results


def report(
    reps: list[list[dict[str, Any]]], lines: int, actions: int, loads: list[float], read: dict[str, str]
) -> dict[str, Any]:
    """Medians per job and the ratios to the parse; ``read``: each job's input."""
    med = {
        job: {
            "seconds": statistics.median(r["seconds"] for rep in reps for r in rep if r["job"] == job),
            "cpu": statistics.median(r["cpu"] for rep in reps for r in rep if r["job"] == job),
            "reps": [round(r["seconds"], 2) for rep in reps for r in rep if r["job"] == job],
            "input": read[job],
        }
        for job in JOBS
    }
    parse = med["parse"]["seconds"]
    return {
        "events": lines,
        "actions": actions,
        "reps": len(reps),
        "jobs": med,
        "ratios": {job: med[job]["seconds"] / parse for job in JOBS if job != "parse"},
        "goals": {"analyze": 1.0, "workload": 0.5},
        "load": {"min": min(loads), "max": max(loads)},
    }


def print_report(r: dict[str, Any]) -> None:
    print(
        f"{r['events']:,} trace events, {r['actions']:,} actions, {r['reps']} rep(s); "
        f"load average {r['load']['min']:.1f} to {r['load']['max']:.1f} on {os.cpu_count()} cores\n",
        flush=True,
    )
    rows = []
    for job in JOBS:
        j = r["jobs"][job]
        ratio = "1.00" if job == "parse" else f"**{r['ratios'][job]:.2f}**"
        goal = f"<= {r['goals'][job]}" if job in r["goals"] else ""
        rows.append([job, j["input"], f"{j['seconds']:.1f} {j['reps']}", f"{j['cpu']:.1f}", ratio, goal])
    print_table(["job", "input", "seconds (median) [reps]", "CPU seconds", "/ parse", "goal"], rows)
    met = [job for job in r["goals"] if r["ratios"][job] <= r["goals"][job]]
    print(f"\ngoals met: {', '.join(met) or 'none'} (of {', '.join(r['goals'])})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="trace events to synthesize (default 10M)")
    parser.add_argument("--trace", type=Path, help="an existing trace to use instead of synthesizing one")
    parser.add_argument("--workload", type=Path, default=WORKLOAD, help="workload file (default load-1m.toml)")
    parser.add_argument("--scale", type=float, default=10.0, help="workload --scale (default 10: 10M actions)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--analyze-from",
        choices=("parquet", "jsonl"),
        default="parquet",
        help="the trace's form analyze reads (default parquet; the parse always reads the JSON lines)",
    )
    parser.add_argument("--dir", type=Path, help="working directory (default a temporary one, removed)")
    parser.add_argument("--json", type=Path, help="the JSON record's file (default bench/results/spark_scale-*.json)")
    parser.add_argument("--analyze-arg", action="append", default=[], help="an extra argument for analyze (repeatable)")
    parser.add_argument(
        "--workload-arg",
        action="append",
        default=[],
        help="an extra argument for workload generate (repeatable; e.g. --workload-arg=--format=parquet,jsonl)",
    )
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    work = args.dir or Path(tempfile.mkdtemp(prefix="spark-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        trace = args.trace
        if trace is None:
            trace = work / "trace.jsonl"
            made = synthesize(trace, args.events)
            print(f"synth: {made['output'][0]} ({made['seconds']:.1f} s)", flush=True)
        elif args.analyze_from == "parquet" and not segment_files(twin_dir(trace)):
            made = make_twin(trace)
            print(f"twin: {made['output'][0]} events -> {twin_dir(trace)} ({made['seconds']:.1f} s)", flush=True)
        read = inputs(trace, args.analyze_from)
        with open(trace, "rb") as f:
            lines = sum(1 for _ in f)
        reps, loads, actions = [], [os.getloadavg()[0]], 0
        for i in range(args.reps):
            rep = one_rep(
                trace, work, args.workload, args.scale, args.analyze_arg, args.workload_arg, args.analyze_from
            )
            loads.append(os.getloadavg()[0])
            actions = rep[-1]["actions"]
            print(
                f"rep {i + 1}: " + ", ".join(f"{r['job']} {r['seconds']:.1f} s" for r in rep),
                flush=True,
            )
            reps.append(rep)
    except JobFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    for job in ("workload", "workload-spark"):  # the engine each one's summary.json names
        read[job] = read[job].format(engine=next(r["engine"] for r in reps[0] if r["job"] == job))
    r = report(reps, lines, actions, loads, read)
    print()
    print_report(r)
    save("spark_scale", r, str(args.json) if args.json else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
