"""Test support: the real broker served in a background thread, or as a process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from clients.labs.runner import LiveBroker
from minibroker import corebuild
from minibroker.config import BrokerConfig

#: A test that injects a fault by replacing a method of one of the core's objects:
#: a compiled object has no attribute to replace, so the test runs on the interpreted
#: core (``make test`` runs the core's tests on both builds).
patches_a_core_object = pytest.mark.skipif(
    corebuild.current().name == "compiled",
    reason="replaces a method of a compiled object: runs on the interpreted core (MINIBROKER_CORE=interpreted)",
)


class RunningBroker(LiveBroker):
    """The labs' live broker with a temporary data directory, for tests."""

    def __init__(self, config: BrokerConfig, data_dir: str | None = None) -> None:
        self._tmp = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="minibroker-test-")
        self.data_dir = data_dir if data_dir is not None else self._tmp.name  # type: ignore[union-attr]
        super().__init__(
            config.on_free_ports().replace(transport={"host": "127.0.0.1"}, broker={"data_dir": self.data_dir})
        )

    def start(self) -> RunningBroker:  # type: ignore[override]
        super().start()
        return self

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def stop(self) -> None:
        super().stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        if self.error is not None:
            raise self.error


def start_broker_process(
    data_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, int]:
    """``minibroker serve`` as a real process on an ephemeral port (with ``env`` added to
    the environment); returns it and the port. What it logged until it listened is in
    the process's ``startup_log``."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "serve",
            "--port",
            "0",
            "--websocket-port",
            "0",
            "--console-port",
            "0",
            "--data-dir",
            str(data_dir),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    deadline = time.time() + 30
    proc.startup_log = ""  # type: ignore[attr-defined]
    while time.time() < deadline:
        line = proc.stdout.readline()
        proc.startup_log += line  # type: ignore[attr-defined]
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the broker process did not start")


def run_client_script(argv: list[str], client: str) -> dict[str, Any]:
    """Run a third-party client's script (``tests/interop``) that prints one JSON object of
    what it saw; fail with all it printed if it does not finish cleanly."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"the {client} script failed ({p.returncode}): {p.stdout}{p.stderr}"
    return json.loads(p.stdout)


def lab_run_results(directory: Path) -> dict[str, Any]:
    """Every run of the lab in ``directory`` on the virtual clock, by run name, its printing kept quiet."""
    from clients.labs import load_lab, run_lab

    printed: list[str] = []
    return {r.spec.name: r for r in run_lab(load_lab(directory), out=printed.append)}
