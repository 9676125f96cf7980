"""The project as a user installs it: the wheel built from this tree, installed into a
fresh virtual environment, serves the console's page, its pinned libraries and /metrics.

The wheel is built without build isolation and installed without its dependencies (the
test runs offline); the fresh environment finds websockets and prometheus_client in this
interpreter's site-packages through a ``.pth`` file, after its own, so the broker it runs
is the wheel's and nothing else (asserted)."""

from __future__ import annotations

import hashlib
import json
import queue
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules", "*.egg-info")
    for name in ("minibroker", "storage", "clients"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    [wheel] = dist.glob("minibroker-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    env_dir = tmp_path / "venv"
    venv.create(env_dir)  # no pip of its own: this interpreter's pip installs into it (--python)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=WAIT) as response:
        return response.status, response.read()


def test_the_wheel_in_a_fresh_venv_serves_the_console_its_libraries_and_metrics(tmp_path: Path) -> None:
    env_dir = _fresh_venv(tmp_path, _build_wheel(tmp_path))
    clean_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH: the wheel's code only
    where = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import minibroker; print(minibroker.__file__)"],
        capture_output=True,
        text=True,
        env=clean_env,
        check=True,
        cwd=tmp_path,  # not this checkout: python -c puts the working directory first on sys.path
    ).stdout
    assert where.startswith(str(env_dir)), where
    broker = subprocess.Popen(
        [
            str(env_dir / "bin" / "minibroker"),
            "serve",
            "--port",
            "0",
            "--websocket-port",
            "0",
            "--console-port",
            "any",
            "--loop",
            "asyncio",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env,
        cwd=tmp_path,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert broker.stderr is not None
    threading.Thread(target=lambda: [lines.put(line) for line in broker.stderr], daemon=True).start()  # type: ignore[union-attr]
    try:
        log: list[str] = []
        port = None
        deadline = time.monotonic() + WAIT
        while port is None and time.monotonic() < deadline:
            try:
                log.append(lines.get(timeout=1))
            except queue.Empty:
                assert broker.poll() is None, "".join(log)
                continue
            found = re.search(r"web console on http://127\.0\.0\.1:(\d+)/", log[-1])
            port = int(found.group(1)) if found else None
        assert port is not None, "".join(log)
        base = f"http://127.0.0.1:{port}"
        status, page = _get(base + "/")
        assert status == 200 and b"static/vendor/stomp.umd.min.js" in page
        pinned = json.loads((ROOT / "minibroker" / "edge" / "console" / "vendor.json").read_text())["files"]
        for entry in pinned:
            status, body = _get(f"{base}/static/vendor/{entry['name']}")
            assert status == 200 and hashlib.sha256(body).hexdigest() == entry["sha256"], entry["name"]
        status, metrics = _get(base + "/metrics")
        assert status == 200 and b"minibroker_connections 0.0" in metrics
        assert not any("page is off" in line or "Traceback" in line for line in log), "".join(log)
    finally:
        broker.terminate()
        broker.wait(timeout=WAIT)
