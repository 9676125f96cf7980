"""The analysis on a real Spark standalone cluster (master + worker on 127.0.0.1),
launched with spark-submit, gives the same output as local mode."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from clients.spark.session import QUICK_PLANS

from .conftest import ANALYSIS_ARGS
from .scenarios import EXPECTED

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FAST_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_CONF_DIR=str(ROOT / "clients" / "spark" / "conf"),
        SPARK_DAEMON_JAVA_OPTS=FAST_JVM,  # the master's and the worker's JVMs: they start and idle
    )
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return env


def _wait(what: str, check, procs, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"{p.args[:3]} exited with {p.returncode} waiting for {what}"
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def standalone(tmp_path):
    """A master and one worker; yields (master URL, web UI port); both are stopped after."""
    port, ui, wport, wui = _free_ports(4)
    logs = tmp_path / "logs"
    logs.mkdir()
    spark_class = _spark_bin("spark-class")
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    [spark_class, *args],
                    env=_env(),
                    cwd=tmp_path,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )

    def alive_workers() -> int:
        return len([w for w in _master_state(ui)["workers"] if w["state"] == "ALIVE"])

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        _wait("the master", lambda: alive_workers() == 0, procs)
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--port",
            str(wport),
            "--webui-port",
            str(wui),
            "--cores",
            "2",
            "--memory",
            "2g",
            "--work-dir",
            str(tmp_path / "work"),
            f"spark://127.0.0.1:{port}",
        )
        _wait("the worker to register", lambda: alive_workers() == 1, procs)
        yield f"spark://127.0.0.1:{port}", ui
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _master_state(ui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
        return json.load(r)


def _csv_rows(path: Path) -> list[tuple]:
    with open(path) as f:
        return sorted(tuple(r.items()) for r in csv.DictReader(f))


def test_analysis_on_a_standalone_cluster_matches_local(standalone, pathology_traces, pathology_analysis, tmp_path):
    from clients.spark.pyfiles import build_pyfiles

    master, ui = standalone
    zip_path = build_pyfiles(tmp_path / "minibroker-py.zip")
    out = tmp_path / "cluster-out"
    cmd = [
        _spark_bin("spark-submit"),
        "--master",
        master,
        "--py-files",
        str(zip_path),
        "--executor-memory",
        "1g",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.sql.adaptive.enabled=false",
        # test-only JVM settings (see spark-notes): quick start, slow on big inputs
        "--conf",
        f"spark.driver.extraJavaOptions={FAST_JVM}",
        "--conf",
        f"spark.executor.extraJavaOptions={FAST_JVM}",
        *[arg for key, value in QUICK_PLANS.items() for arg in ("--conf", f"{key}={value}")],
        str(ROOT / "clients" / "spark" / "analyze.py"),
        *pathology_traces,
        "--out",
        str(out),
        *ANALYSIS_ARGS,
    ]
    run = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"{len(EXPECTED)} finding(s)" in run.stdout
    # the job really ran on the cluster: the master lists it as a finished application
    apps = _master_state(ui)["completedapps"]
    assert [a["name"] for a in apps] == ["minibroker-analyze"]
    local = pathology_analysis
    assert json.loads((out / "findings.json").read_text()) == json.loads((local / "findings.json").read_text())
    names = sorted(p.name for p in (local / "csv").glob("*.csv"))
    assert names == sorted(p.name for p in (out / "csv").glob("*.csv")) and len(names) == 9
    for name in names:
        assert _csv_rows(out / "csv" / name) == _csv_rows(local / "csv" / name), name
    assert (out / "report.md").read_text().split("## Findings", 1)[1] == (local / "report.md").read_text().split(
        "## Findings", 1
    )[1]
