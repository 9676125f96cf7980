#!/usr/bin/env python3
"""compare.py - minibroker next to ActiveMQ Classic on the shared STOMP matrix.

    make bench                                       # ours only, reference numbers beside
    .venv/bin/python bench/compare.py --with-activemq --reps 3
    .venv/bin/python bench/compare.py --with-activemq --with-rabbitmq --reps 3   # three columns
    .venv/bin/python bench/compare.py --with-activemq --with-rabbitmq --with-relay --reps 3   # and the floor
    .venv/bin/python bench/compare.py --quick --scenarios A,C        # smoke run, seconds
    .venv/bin/python bench/compare.py --loop asyncio --variant uvloop=bench/configs/uvloop.toml \
        --scenarios A,C,D,E                          # asyncio's loop and uvloop side by side
    .venv/bin/python bench/compare.py --summarize bench/results/X.jsonl

Starts our broker (``minibroker serve``, free port, fresh data directory in a
temporary directory; its start-up lines name the core's build and the event
loop, which the output's head and the JSON record) and, with --with-activemq,
Debian's ActiveMQ through the vendored harness/activemq-start.sh (the vendored
activemq.xml, its STOMP and OpenWire ports moved to free ones) and, with
--with-rabbitmq, a RabbitMQ 3.10 node of our own (clients/rabbitmq.py, free
loopback ports; the ratio rows add ours / RabbitMQ) and, with --with-relay, the
harness's relay (harness/stomp_relay.py: frames forwarded, no broker; the
floor). Each rep is one
harness/stomp_bench.py process with its own destination name. Scenarios and
their arguments come from the vendored harness/run_matrix.py (A, B, C, D, S, E;
D2 too on request).

The machine is shared, so (as run_matrix.py does) each rep first waits, within
--max-quiet-wait, for other processes to use <= --quiet-pct CPU, and a rep
during which they used > --noisy-cpu is repeated (at most --max-extra extra
attempts per scenario and broker). Reps alternate between the brokers: rep i of
every broker runs before rep i+1 of any, and the order flips each rep. While one
broker's rep runs (warm-ups too) the others are paused (pause.py: SIGSTOP to each
of their processes, SIGCONT before their own reps; --no-pause-idle runs them all
the time); "other" CPU, before a rep and during it, is everything but the
measured broker and its client, the idle brokers included.
ActiveMQ first gets --warmups discarded 100k runs (its JIT keeps warming up),
ours one.

Prints one markdown table (stdout) and, beside another broker, the shared
matrix as docs/benchmarks.md shows it (``report.print_table``: a column per
broker, the ratios, the goals met or not) and the goals; progress goes to
stderr; every attempt is one JSON line in bench/results/<timestamp>.jsonl, the
run's first line with the load average before it, the last with the load after. Exit status: 0 when every
attempt was ok (nothing lost, duplicated or failed), 1 when one was not (a
broker that dies ends the run there, with the table so far), 2 when a broker
could not be started, 130 on Ctrl-C. Every process started here is stopped
before exit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HARNESS = HERE / "harness"
sys.path.insert(0, str(HARNESS))
sys.path.insert(0, str(HERE))

import report  # noqa: E402
import run_matrix  # noqa: E402  (vendored: SCENARIOS, wait_quiet)
import summary  # noqa: E402
from brokers import ActiveMQ, BrokerStartError, Ours, RabbitMQ, Relay, RssSampler, proc_status_mb  # noqa: E402
from pause import Pauser  # noqa: E402

DEFAULT_SCENARIOS = "A,B,C,D,S,E"
# --quick: messages per scenario, small enough for a test (the rest of the arguments unchanged)
QUICK_MESSAGES = {"warmup": 2000, "A": 2000, "B": 2000, "C": 1000, "D": 500, "D2": 500, "S": 500, "E": 200}
QUICK_TIMEOUT = 30


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--with-activemq",
        action="store_true",
        help="also start Debian's ActiveMQ (apt-get install -y activemq) and alternate with it",
    )
    ap.add_argument(
        "--with-rabbitmq",
        action="store_true",
        help="also start a RabbitMQ 3.10 node of our own (apt-get install -y rabbitmq-server) and alternate with it",
    )
    ap.add_argument(
        "--with-relay",
        action="store_true",
        help="also run the harness's relay (harness/stomp_relay.py: frames forwarded, no broker), the floor",
    )
    ap.add_argument(
        "--scenarios",
        default=DEFAULT_SCENARIOS,
        help=f"comma-separated, from {','.join(k for k in run_matrix.SCENARIOS if k != 'warmup')} "
        f"(default {DEFAULT_SCENARIOS})",
    )
    ap.add_argument("--reps", type=int, help="measured reps per scenario and broker (default 3, --quick 1)")
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: tiny message counts, 1 rep, 1 warm-up, no quiet-window waiting"
    )
    ap.add_argument("--warmups", type=int, help="discarded 100k warm-up runs for ActiveMQ (default 3, --quick 1)")
    ap.add_argument("--config", metavar="FILE", help="TOML configuration for our broker (default: embedded)")
    ap.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        help="our broker's event loop (serve --loop; default: the configuration's, auto). "
        "A variant's comes from its file: bench/configs/uvloop.toml sets uvloop",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="also run our broker with this configuration, as broker 'ours:LABEL' (repeatable); "
        "the table adds the ratio ours:LABEL / ours",
    )
    ap.add_argument(
        "--console-page",
        action="store_true",
        help="add ours:console, our broker with the web console served and one console page open "
        "in headless Chromium (what the console and its WebSocket cost)",
    )
    ap.add_argument("--port", type=int, help="port for our broker (default: a free one)")
    ap.add_argument("--out", help="JSON lines file (default bench/results/<timestamp>.jsonl)")
    ap.add_argument(
        "--quiet-pct",
        type=float,
        default=25.0,
        help="before a rep, wait until other processes use <= this CPU%% (100 = one core)",
    )
    ap.add_argument("--max-quiet-wait", type=float, default=60.0, help="seconds to wait for a quiet window")
    ap.add_argument("--noisy-cpu", type=float, default=30.0, help="a rep is noisy if others used > this CPU%%")
    ap.add_argument(
        "--max-extra", type=int, default=3, help="extra attempts per scenario and broker to replace noisy reps"
    )
    ap.add_argument(
        "--no-pause-idle",
        dest="pause_idle",
        action="store_false",
        help="let the brokers not under measurement run beside each rep (by default they are paused: SIGSTOP, "
        "then SIGCONT before their own reps)",
    )
    ap.add_argument("--summarize", metavar="JSONL", help="print the table of an earlier run and exit")
    a = ap.parse_args(argv)
    a.scenario_list = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    unknown = [s for s in a.scenario_list if s not in run_matrix.SCENARIOS or s == "warmup"]
    if unknown:
        ap.error(
            f"unknown scenario(s) {', '.join(unknown)}; choose from "
            f"{', '.join(k for k in run_matrix.SCENARIOS if k != 'warmup')}"
        )
    if a.reps is None:
        a.reps = 1 if a.quick else 3
    if a.warmups is None:
        a.warmups = 1 if a.quick else 3
    if a.reps < 1 or a.warmups < 0 or a.max_extra < 0:
        ap.error("--reps must be >= 1, --warmups and --max-extra >= 0")
    if a.quick:
        a.max_quiet_wait = 0.0
        a.max_extra = 0
    variants = []
    for v in a.variant:
        label, sep, path = v.partition("=")
        if not sep or not label or not path:
            ap.error(f"--variant wants LABEL=FILE, not {v!r}")
        variants.append((f"ours:{label}", path))
    a.variants = variants
    for path in [a.config] + [p for _, p in variants]:
        if path and not Path(path).is_file():
            ap.error(f"configuration file {path!r} not found")
    return a


class BrokerDied(Exception):
    """Our broker process exited during a rep: the rest of the run cannot measure it."""


class Runner:
    """Runs reps against started brokers and appends each result to the JSON lines file."""

    def __init__(
        self, args, brokers, sampler: RssSampler, out: Path, run_id: str, pauser: Pauser | None = None
    ) -> None:
        """``pauser``: pauses the brokers not under measurement during each rep (None: they run)."""
        self.a = args
        self.brokers = brokers
        self.pauser = pauser
        self.sampler = sampler
        self.out = out
        self.run_id = run_id
        self.records: list[dict] = []

    def write(self, rec: dict) -> None:
        self.records.append(rec)
        with open(self.out, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def bench_argv(self, broker, scen: str) -> tuple[list[str], int]:
        _desc, sargs, tmo = run_matrix.SCENARIOS[scen]
        argv = [
            sys.executable,
            str(HARNESS / "stomp_bench.py"),
            "--host",
            "127.0.0.1",
            "--port",
            str(broker.port),
            "--timeout",
            str(tmo),
            "--label",
            f"{broker.name}:{scen}",
        ] + sargs.split()
        if self.a.quick:
            tmo = QUICK_TIMEOUT
            argv += [
                "--messages",
                str(QUICK_MESSAGES[scen]),
                "--timeout",
                str(tmo),
                "--idle-timeout",
                "5",
                "--linger",
                "0.1",
            ]
        i = argv.index("--dest")
        argv[i + 1] += f".{broker.name.replace(':', '-')}.{int(time.time() * 1000) % 10**9}"
        argv += ["--broker-pid", str(broker.pid)]
        return argv, tmo

    def run_one(self, broker, scen: str, phase: str, rep: int, attempt: int) -> dict:
        a = self.a
        paused = self.pauser.measure(broker.name) if self.pauser else []
        # "other" is everything but the measured broker, as the harness counts it during the rep:
        # the idle brokers included (paused, they use none)
        if a.max_quiet_wait > 0:
            pre_other, waited = run_matrix.wait_quiet([broker.pid], a.quiet_pct, a.max_quiet_wait)
        else:
            pre_other, waited = None, 0.0
        argv, tmo = self.bench_argv(broker, scen)
        self.sampler.reset(broker.pid)
        t0 = time.time()
        stderr_tail = ""
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=tmo + 60)
            stderr_tail = p.stderr[-1500:]
            try:
                rec = json.loads((p.stdout.strip().splitlines() or ["{}"])[-1])
            except json.JSONDecodeError:
                rec = {"status": "bad-output", "ok": False, "stdout_tail": p.stdout[-600:]}
        except subprocess.TimeoutExpired:
            rec = {"status": "subprocess-timeout", "ok": False}
        other = rec.get("other_cpu_pct")
        noisy = phase == "measure" and other is not None and other > a.noisy_cpu
        mem = rec.get("broker_mem_mb") or {}
        rec.update(
            {
                "type": "rep",
                "run_id": self.run_id,
                "broker": broker.name,
                "broker_kind": broker.kind,
                "scenario": scen,
                "scenario_desc": run_matrix.SCENARIOS[scen][0],
                "phase": phase,
                "rep": rep,
                "attempt": attempt,
                "quick": a.quick,
                "noisy": noisy,
                "paused": paused,
                "pre_run_other_cpu_pct": pre_other,
                "quiet_wait_s": waited,
                "wall_s": round(time.time() - t0, 2),
                "rss_peak_mb": max(self.sampler.peak(broker.pid), mem.get("VmRSS") or 0.0),
                "rss_hwm_mb": mem.get("VmHWM"),
                "argv": " ".join(argv[1:]),
                "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        )
        if broker.kind == "ours":
            rec["data_dir_bytes"] = broker.data_bytes()
            if broker.exit_status() is not None:
                rec.update(ok=False, broker_exited=broker.exit_status())
            if not rec.get("ok"):
                rec["broker_log_tail"] = broker.log_tail()
        if not rec.get("ok") and stderr_tail:
            rec["stderr_tail"] = stderr_tail
        self.write(rec)
        lat = rec.get("latency_ms") or {}
        log(
            f"{broker.name:10s} {scen:6s} {phase:7s} rep{rep} try{attempt} {rec.get('status', '?'):8s} "
            f"ok={rec.get('ok')} e2e={rec.get('e2e_rate')} p50={lat.get('p50')} p99={lat.get('p99')} "
            f"bcpu={rec.get('broker_cpu_pct')} rss={rec['rss_peak_mb']} other={other}"
            f"{' paused=' + ','.join(paused) if paused else ''}"
            f"{' NOISY' if noisy else ''}{'' if rec.get('ok') else ' FAILED: ' + '; '.join(rec.get('errors') or [])}"
        )
        return rec

    def warm_up(self) -> None:
        for broker in self.brokers:
            n = self.a.warmups if broker.kind == "activemq" else min(1, self.a.warmups)
            for i in range(n):
                self.run_one(broker, "warmup", "warmup", i + 1, 1)

    def measure(self) -> None:
        a = self.a
        for scen in a.scenario_list:
            extra = {b.name: a.max_extra for b in self.brokers}
            for rep in range(1, a.reps + 1):
                # alternate: every broker's rep i before anyone's rep i+1, order flipped every rep
                k = (rep - 1) % len(self.brokers)
                for broker in self.brokers[k:] + self.brokers[:k]:
                    attempt = 1
                    rec = self.run_one(broker, scen, "measure", rep, attempt)
                    if rec.get("broker_exited") is not None:
                        raise BrokerDied(
                            f"{broker.name} exited with status {rec['broker_exited']} during {scen} "
                            f"rep {rep}; stopping the run"
                        )
                    while rec["noisy"] and extra[broker.name] > 0:
                        extra[broker.name] -= 1
                        attempt += 1
                        rec = self.run_one(broker, scen, "measure", rep, attempt)


def git_commit() -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
        return (p.stdout.strip() + ("+dirty" if dirty else "")) or None
    except OSError:
        return None


def print_report(records: list[dict], scenarios: list[str], brokers: list[str], meta: dict | None) -> bool:
    """Print the table and what goes with it; True when every attempt (warm-ups included) was ok."""
    ours = "ours"
    theirs = "activemq" if "activemq" in brokers else None
    pairs = [(b, "activemq") for b in brokers if b.startswith("ours") and theirs]
    pairs += [(b, "rabbitmq") for b in brokers if b.startswith("ours") and "rabbitmq" in brokers]
    pairs += [(b, "ours") for b in brokers if b.startswith("ours:")]
    pairs += [(b, "relay") for b in brokers if b.startswith("ours") and "relay" in brokers]
    others = (
        " and ".join(n for n, on in (("ActiveMQ", theirs), ("RabbitMQ", "rabbitmq" in brokers)) if on) or "ActiveMQ"
    )
    if meta:
        print(
            f"# minibroker vs {others}, {meta.get('date')} on {meta.get('host')} "
            f"({meta.get('cpus')} CPUs), minibroker {meta.get('git')}"
            + (f", ActiveMQ {meta.get('activemq_version')}" if theirs else "")
            + (f", RabbitMQ {meta.get('rabbitmq_version')}" if "rabbitmq" in brokers else "")
            + (", and the harness's relay (the floor)" if "relay" in brokers else "")
            + (
                ""
                if len(brokers) < 2
                else "; each measured with the others paused"
                if meta.get("pause_idle")
                else "; the others running beside each one's reps (not paused)"
            )
        )
        print(f"# command: {meta.get('command')}")
        for info in meta.get("brokers") or []:
            if info.get("core") or info.get("loop"):
                print(
                    f"# {info['broker']}: core {info.get('core') or '?'}, event loop {info.get('loop') or '?'}, "
                    f"start to port open {info.get('startup_ms')} ms"
                )
        load = [meta.get(k) for k in ("load_before", "load_after") if meta.get(k)]
        if load:
            print("# load average (1, 5, 15 min): " + ", then ".join(" ".join(f"{x:.2f}" for x in v) for v in load))
    print()
    print(summary.table(records, scenarios, brokers, pairs))
    print()
    print(
        "msg/s: end-to-end (first send to last expected delivery); C counts deliveries (4 consumers); "
        "E is paced at 500 msg/s, read its latency. Ratio rows: ours / the other broker's medians (the figure to "
        "quote), per-rep paired ratios in brackets; for latency, CPU and RSS lower is better. RSS peak: VmRSS "
        "sampled every 0.1 s during the reps. A '(noisy)' count > 0 means other processes used "
        "more CPU than --noisy-cpu during those reps even after retries."
    )
    if not theirs:
        print()
        print(f"## Reference, not this run ({summary.REFERENCE_SOURCE})")
        print()
        print(summary.reference_table(records, scenarios, ours))
        print()
        print(
            f"ActiveMQ RSS in that run: {summary.REFERENCE_RSS}. The ratios above compare with another day's "
            "numbers on a noisy shared machine: indicative only; run with --with-activemq for the real figure."
        )
    if any(b in brokers for b in summary.OTHERS):
        print()
        print("## The shared matrix (the table of docs/benchmarks.md)")
        print()
        report.print_table(*summary.matrix_rows(records, scenarios, ours, brokers, meta))
        print()
        print(
            "Medians of the reps (E: p99 latency, lower is better); ratios: ours / the other broker's medians, "
            "the paired reps' range in brackets."
        )
    tl = summary.targets(records, ours, brokers, meta)
    if meta and meta.get("quick"):
        tl = ["- not judged: a --quick run is a smoke test, its message counts are too small to measure"]
    if tl:
        print()
        print("## Goals")
        print()
        print("\n".join(tl))
    hwm = {b: v for b, v in ((meta or {}).get("hwm") or {}).items() if v is not None}
    if hwm:
        print()
        print(
            "Peak RSS over the whole run (VmHWM, including warm-ups): "
            + ", ".join(f"{b} {v} MB" for b, v in hwm.items())
        )
    fl = summary.failures([r for r in records if r.get("type") == "rep"])
    if fl:
        print()
        print("## Failed attempts")
        print()
        print("\n".join(fl))
    return all(r.get("ok") for r in records if r.get("type") == "rep")


def summarize(path: str) -> int:
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    meta = next((r for r in records if r.get("type") == "run"), None)
    reps = [r for r in records if r.get("type") == "rep"]
    scenarios, brokers = [], []
    for r in reps:
        if r.get("phase") == "measure" and r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
        if r["broker"] not in brokers:
            brokers.append(r["broker"])
    end = next((r for r in records if r.get("type") == "end"), None)
    if meta and end:
        meta = dict(meta, hwm=end.get("hwm"), load_after=end.get("load_after"))
    return 0 if print_report(records, scenarios, brokers, meta) else 1


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.summarize:
        return summarize(a.summarize)
    try:
        if a.with_activemq:
            ActiveMQ.check_installed()
        if a.with_rabbitmq:
            RabbitMQ.check_installed()
    except BrokerStartError as exc:
        log(f"compare.py: {exc}")
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"{stamp}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    # SIGINT explicitly too: a shell starting us in the background would have it ignored
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)

    workdir = Path(tempfile.mkdtemp(prefix="minibroker-bench-"))
    brokers: list = [Ours("ours", workdir, a.config, a.port, loop=a.loop)]
    brokers += [Ours(name, workdir, path) for name, path in a.variants]
    if a.console_page:
        brokers.append(Ours("ours:console", workdir, a.config, console_page=True, loop=a.loop))
    if a.with_activemq:
        brokers.append(ActiveMQ(workdir))
    if a.with_rabbitmq:
        brokers.append(RabbitMQ(workdir))
    if a.with_relay:
        brokers.append(Relay(workdir))
    sampler = RssSampler()
    pauser = Pauser(brokers) if a.pause_idle and len(brokers) > 1 else None
    status = 1
    runner = None
    try:
        for b in brokers:
            log(f"starting {b.name} ...")
            b.start()
            log(f"{b.name}: {json.dumps(b.info)}")
        for b in brokers:
            sampler.watch(b.pid)
        sampler.start()
        meta = {
            "type": "run",
            "run_id": stamp,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": " ".join(["bench/compare.py"] + (sys.argv[1:] if argv is None else list(argv))),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "git": git_commit(),
            "activemq_version": ActiveMQ.version() if a.with_activemq else None,
            "rabbitmq_version": RabbitMQ.version() if a.with_rabbitmq else None,
            "scenarios": a.scenario_list,
            "reps": a.reps,
            "warmups": a.warmups,
            "quick": a.quick,
            "brokers": [b.info for b in brokers],
            "config": a.config,
            "variants": a.variants,
            "quiet_pct": a.quiet_pct,
            "max_quiet_wait": a.max_quiet_wait,
            "noisy_cpu": a.noisy_cpu,
            "max_extra": a.max_extra,
            "pause_idle": a.pause_idle,
        }
        meta["load_before"] = list(os.getloadavg())
        runner = Runner(a, brokers, sampler, out, stamp, pauser)
        runner.write(meta)
        runner.warm_up()
        try:
            runner.measure()
        except BrokerDied as exc:
            log(f"compare.py: {exc}")
        hwm = {b.name: proc_status_mb(b.pid).get("VmHWM") for b in brokers}
        meta["load_after"] = list(os.getloadavg())
        runner.write({"type": "end", "run_id": stamp, "hwm": hwm, "load_after": meta["load_after"]})
        meta["hwm"] = hwm
        ok = print_report(runner.records, a.scenario_list, [b.name for b in brokers], meta)
        status = 0 if ok else 1
        if not ok:
            log("compare.py: some attempts were not ok (see 'Failed attempts' above)")
    except BrokerStartError as exc:
        log(f"compare.py: {exc}")
        status = 2
    except KeyboardInterrupt:
        log("compare.py: interrupted; stopping the brokers")
        status = 130
    finally:
        sampler.stop()
        if pauser is not None:
            try:
                pauser.resume_all()  # a paused broker cannot stop; nor may a pause outlive the run
            except Exception as exc:  # stop them all the same (SIGKILL reaches a stopped process)
                log(f"compare.py: resuming the paused brokers failed: {exc!r}")
        for b in reversed(brokers):
            try:
                msg = b.stop()
                if msg:
                    log(msg)
            except Exception as exc:  # keep stopping the others
                log(f"compare.py: stopping {b.name} failed: {exc!r}")
        shutil.rmtree(workdir, ignore_errors=True)
        if runner is not None:
            log(f"raw results: {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
