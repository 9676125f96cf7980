#!/usr/bin/env python3
# vendored from ../shared/bench/run_matrix.py, unchanged except for this line
"""run_matrix.py - run the anchor scenario matrix against one already-started broker.

    run_matrix.py run --broker activemq --port 61613 --pidfile /tmp/amq-bench/activemq.pid \
                      --scenarios warmup,A,B,C,D,D2,S,E --reps 3 --out results/raw/activemq.jsonl
    run_matrix.py summarize results/raw/*.jsonl > results/table.md

Every rep is a separate stomp_bench.py process with its own hard --timeout plus a subprocess
timeout, and its own destination name (so no run sees another run's messages).
The machine is shared (2 cores) with other processes, so before each rep we wait (bounded)
for a quiet window, and a rep during which other processes used > --noisy-cpu % CPU is marked
noisy and repeated (at most --max-extra extra attempts per scenario); the summary uses clean reps.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable

# name: (description, stomp_bench args, timeout seconds)
SCENARIOS = {
    "warmup": ("JIT warm-up (discarded)", "--dest /queue/warm --messages 100000 --size 256", 120),
    "A": ("queue, non-persistent, 1p/1c, 100k x 256 B, ack auto",
          "--dest /queue/A --messages 100000 --size 256 --producers 1 --consumers 1 --ack auto", 180),
    "B": ("queue, persistent, receipt every 100, 1p/1c, 100k x 256 B, ack auto",
          "--dest /queue/B --messages 100000 --size 256 --persistent true --receipt-every 100", 400),
    "C": ("topic, non-persistent, 1p/4c, 50k x 256 B, ack auto",
          "--dest /topic/C --messages 50000 --size 256 --producers 1 --consumers 4", 240),
    "D": ("queue, 1p/1c, ack client-individual, prefetch 1, 20k x 256 B",
          "--dest /queue/D --messages 20000 --size 256 --ack client-individual --prefetch 1", 240),
    "D2": ("queue, 1p/1c, ack client (cumulative, acked per msg), prefetch 1, 20k x 256 B",
           "--dest /queue/D2 --messages 20000 --size 256 --ack client --prefetch 1", 240),
    "S": ("queue, non-persistent, 1p/1c, sync send (receipt every 1), 20k x 256 B",
          "--dest /queue/S --messages 20000 --size 256 --receipt-every 1", 240),
    "E": ("latency: queue, non-persistent, 1p/1c, 500 msg/s paced, 5k x 256 B",
          "--dest /queue/E --messages 5000 --size 256 --rate 500", 120),
}


def busy_other_pct(exclude_pids, secs=1.0):
    """CPU% (100 = one core) used during `secs` by everything except exclude_pids."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        busy = sum(v[:8]) - v[3] - v[4]
        own = 0
        for pid in exclude_pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    p = f.read().rsplit(")", 1)[1].split()
                own += int(p[11]) + int(p[12])
            except Exception:
                pass
        return busy, own, time.monotonic()

    b0, o0, t0 = snap()
    time.sleep(secs)
    b1, o1, t1 = snap()
    hz = os.sysconf("SC_CLK_TCK")
    return 100 * ((b1 - b0) - (o1 - o0)) / hz / (t1 - t0)


def wait_quiet(exclude_pids, limit_pct, max_wait):
    t0 = time.time()
    while True:
        other = busy_other_pct(exclude_pids)
        if other <= limit_pct or time.time() - t0 > max_wait:
            return round(other, 1), round(time.time() - t0, 1)
        time.sleep(2)


def cmd_run(a):
    pid = None
    if a.pidfile:
        pid = int(open(a.pidfile).read().strip())
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    names = [s for s in a.scenarios.split(",") if s]
    for name in names:
        desc, sargs, tmo = SCENARIOS[name]
        reps = 1 if name == "warmup" else a.reps
        clean = 0
        attempts = 0
        while clean < reps and attempts < reps + (0 if name == "warmup" else a.max_extra):
            attempts += 1
            pre_other, waited = wait_quiet([pid] if pid else [], a.quiet_pct, a.max_quiet_wait)
            dest_suffix = f".{a.broker}.{int(time.time()*1000) % 10**9}"
            argv = [PY, os.path.join(HERE, "stomp_bench.py"), "--host", a.host, "--port", str(a.port),
                    "--timeout", str(tmo), "--label", f"{a.broker}:{name}{a.tag}"] + sargs.split() + a.extra.split()
            i = argv.index("--dest")
            argv[i + 1] += dest_suffix
            if pid:
                argv += ["--broker-pid", str(pid)]
            t0 = time.time()
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=tmo + 60)
                line = (p.stdout.strip().splitlines() or ["{}"])[-1]
                rec = json.loads(line)
                stderr_tail = p.stderr[-600:]
            except subprocess.TimeoutExpired:
                rec = {"status": "subprocess-timeout", "ok": False}
                stderr_tail = ""
            except json.JSONDecodeError:
                rec = {"status": "bad-output", "ok": False}
                stderr_tail = p.stderr[-600:]
            other = rec.get("other_cpu_pct")
            noisy = other is not None and other > a.noisy_cpu
            rec.update({"broker": a.broker, "scenario": name + a.tag, "scenario_desc": desc, "attempt": attempts,
                        "pre_run_other_cpu_pct": pre_other, "quiet_wait_s": waited, "noisy": noisy,
                        "wall_s": round(time.time() - t0, 2), "argv": " ".join(argv[1:]),
                        "when": time.strftime("%Y-%m-%dT%H:%M:%S")})
            if stderr_tail and not rec.get("ok"):
                rec["stderr_tail"] = stderr_tail
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            lat = rec.get("latency_ms") or {}
            print(f"{a.broker:9s} {name+a.tag:7s} try{attempts} {rec.get('status'):8s} ok={rec.get('ok')} "
                  f"send={rec.get('send_rate')} e2e={rec.get('e2e_rate')} p50={lat.get('p50')} p99={lat.get('p99')} "
                  f"bcpu={rec.get('broker_cpu_pct')} ccpu={rec.get('client_cpu_pct')} other={other} "
                  f"{'NOISY' if noisy else ''}", flush=True)
            if not noisy:
                clean += 1
            if not rec.get("ok") and a.stop_on_fail:
                break


def fmt(vals, nd=0):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    med = statistics.median(vals)
    f = (lambda x: f"{x:,.{nd}f}")
    if len(vals) == 1:
        return f(med)
    return f"{f(med)} [{f(min(vals))}–{f(max(vals))}]"


def cmd_summarize(a):
    recs = []
    for path in a.files:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    recs.append(json.loads(line))
    groups: dict[tuple, list] = {}
    order = []
    for r in recs:
        if r.get("scenario", "").startswith("warmup"):
            continue
        k = (r["broker"], r["scenario"])
        if k not in groups:
            order.append(k)
        groups.setdefault(k, []).append(r)
    print("| broker | scen | runs used (ok/noisy) / total | send msg/s | e2e msg/s | p50 ms | p99 ms | broker CPU % | client CPU % | other CPU % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in order:
        rs = groups[k]
        # clean reps first; if fewer than --want, top up with the least noisy ones (flagged)
        clean = [r for r in rs if not r.get("noisy")]
        noisy = sorted((r for r in rs if r.get("noisy")), key=lambda r: r.get("other_cpu_pct") or 0)
        use = clean[: a.want] + noisy[: max(0, a.want - len(clean))]
        okc = sum(1 for r in use if r.get("ok"))
        nn = sum(1 for r in use if r.get("noisy"))
        good = [r for r in use if r.get("ok")] or use
        lat = [r.get("latency_ms") or {} for r in good]
        print(f"| {k[0]} | {k[1]} | {len(use)} ({okc}/{nn}) / {len(rs)} | {fmt([r.get('send_rate') for r in good])} | "
              f"{fmt([r.get('e2e_rate') for r in good])} | {fmt([l.get('p50') for l in lat], 2)} | "
              f"{fmt([l.get('p99') for l in lat], 2)} | {fmt([r.get('broker_cpu_pct') for r in good])} | "
              f"{fmt([r.get('client_cpu_pct') for r in good])} | {fmt([r.get('other_cpu_pct') for r in good])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--broker", required=True)
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--pidfile")
    r.add_argument("--scenarios", default="warmup,A,B,C,D,D2,S,E")
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--tag", default="", help="suffix for scenario names (e.g. -r1)")
    r.add_argument("--extra", default="", help="extra stomp_bench args for every scenario")
    r.add_argument("--out", required=True)
    r.add_argument("--quiet-pct", type=float, default=25.0, help="wait until other processes use <= this CPU%%")
    r.add_argument("--max-quiet-wait", type=float, default=120.0)
    r.add_argument("--noisy-cpu", type=float, default=30.0, help="rep is noisy if others used > this CPU%%")
    r.add_argument("--max-extra", type=int, default=3, help="extra attempts per scenario to replace noisy reps")
    r.add_argument("--stop-on-fail", action="store_true")
    s = sub.add_parser("summarize")
    s.add_argument("files", nargs="+")
    s.add_argument("--want", type=int, default=3, help="reps per cell (clean first, then least noisy)")
    a = ap.parse_args()
    if a.cmd == "run":
        if a.extra.startswith("'"):
            a.extra = a.extra.strip("'")
        cmd_run(a)
    else:
        cmd_summarize(a)


if __name__ == "__main__":
    main()
