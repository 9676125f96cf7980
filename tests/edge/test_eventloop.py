"""The event loop: ``minibroker serve --loop auto|asyncio|uvloop``, logged at start.

The rest of the edge's tests run on both loops (``make test``: MINIBROKER_LOOP); these
check the choice itself on a real process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker_support import start_broker_process
from minibroker import eventloop
from minibroker.config import BrokerConfig, parse_config
from minibroker.errors import ConfigError
from wire import Wire

uvloop = pytest.importorskip("uvloop", reason="the fast extra (uvloop) is installed by make test")


def _serve_and_round_trip(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    """Start ``serve`` with ``extra`` arguments, send and receive one message, stop it;
    returns what it logged."""
    proc, port = start_broker_process(tmp_path / "data", *extra, env=env)
    try:
        w = Wire(("127.0.0.1", port))
        assert w.connect().command == "CONNECTED"
        w.send("SUBSCRIBE", {"destination": "/queue/loop", "id": "s"})
        w.send("SEND", {"destination": "/queue/loop"}, b"round trip")
        assert w.until(lambda f: f.command == "MESSAGE").body == b"round trip"
        w.sock.close()
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    return proc.startup_log + out  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "loop, logged",
    [
        ("uvloop", f"event loop: uvloop {uvloop.__version__}"),
        ("asyncio", "event loop: asyncio (_UnixSelectorEventLoop)"),
        ("auto", f"event loop: uvloop {uvloop.__version__}"),
    ],
)
def test_serve_runs_on_the_loop_asked_for_and_says_which(tmp_path: Path, loop: str, logged: str) -> None:
    assert logged in _serve_and_round_trip(tmp_path, "--loop", loop)


def test_the_option_overrides_the_environment_which_overrides_the_config(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('[transport]\nevent_loop = "uvloop"\n')
    env = {"MINIBROKER_LOOP": "asyncio"}
    assert "event loop: asyncio" in _serve_and_round_trip(tmp_path, "--config", str(config), env=env)
    assert "event loop: uvloop" in _serve_and_round_trip(tmp_path, "--config", str(config), "--loop", "uvloop", env=env)
    assert "event loop: uvloop" in _serve_and_round_trip(tmp_path, "--config", str(config), env={"MINIBROKER_LOOP": ""})


def test_uvloop_asked_for_but_not_installed_says_how_to_install_it(tmp_path: Path) -> None:
    # A uvloop that cannot be imported, first on the path: as on a machine without the extra.
    missing = tmp_path / "no-uvloop"
    missing.mkdir()
    (missing / "uvloop.py").write_text("raise ImportError('uvloop is not installed here')\n")
    env = {"PYTHONPATH": f"{missing}:{Path(__file__).resolve().parents[2]}"}
    with socket.socket() as s:  # a free port, so that only the loop can fail
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "serve",
            "--loop",
            "uvloop",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environment(env),
    )
    assert result.returncode == 2
    assert "pip install 'minibroker[fast]'" in result.stderr
    assert "Traceback" not in result.stderr
    # ... and auto falls back to asyncio's own loop there.
    auto = subprocess.run(
        [sys.executable, "-c", "from minibroker import eventloop; print(eventloop.resolve('auto'))"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environment(env),
    )
    assert auto.stdout.strip() == "asyncio", auto.stderr


def test_the_config_key_takes_only_known_loops() -> None:
    assert BrokerConfig().transport.event_loop == "auto"
    with pytest.raises(ConfigError, match="transport.event_loop"):
        parse_config({"transport": {"event_loop": "tokio"}})
    with pytest.raises(ConfigError, match="unknown event loop 'tokio'"):
        eventloop.resolve("tokio")


def _environment(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}
