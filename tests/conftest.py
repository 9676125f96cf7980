"""Shared fixtures: a real broker on a real socket, in a background thread."""
from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from minibroker.config import BrokerConfig
from minibroker.server import BrokerServer, serve


class RunningBroker:
    """A broker served on 127.0.0.1 (an ephemeral port) by a background event loop."""

    def __init__(self, config: BrokerConfig, data_dir: str | None = None) -> None:
        self._tmp = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="minibroker-test-")
        self.data_dir = data_dir if data_dir is not None else self._tmp.name  # type: ignore[union-attr]
        self.config = config.replace(transport={"host": "127.0.0.1", "port": 0}, broker={"data_dir": self.data_dir})
        self.server: BrokerServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(server: BrokerServer) -> None:
                self.server = server
                self._ready.set()

            await serve(self.config, ready=ready, stop=self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced by the fixture
            self.error = exc
            self._ready.set()

    def start(self) -> "RunningBroker":
        self._thread.start()
        if not self._ready.wait(10) or self.server is None:
            raise RuntimeError(f"broker did not start: {self.error!r}")
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the broker's loop (thread-safe) and return its result."""
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(_as_coro(fn), self._loop)
        return fut.result(10)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        if self._tmp is not None:
            self._tmp.cleanup()
        if self.error is not None:
            raise self.error


async def _as_coro(fn: Callable[[], Any]) -> Any:
    return fn()


@pytest.fixture
def broker_factory() -> Iterator[Callable[..., RunningBroker]]:
    """Start brokers with configuration overrides: ``broker_factory(transport={...})``."""
    started: list[RunningBroker] = []

    def start(config: BrokerConfig | None = None, data_dir: str | None = None, **sections: Any) -> RunningBroker:
        cfg = (config or BrokerConfig()).replace(**sections)
        rb = RunningBroker(cfg, data_dir).start()
        started.append(rb)
        return rb

    yield start
    for rb in started:
        rb.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    """A broker with the default configuration on an ephemeral port."""
    return broker_factory()


def start_broker_process(data_dir: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """``minibroker serve`` as a real process on an ephemeral port; returns it and the port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "clients.cli", "serve", "--port", "0", "--data-dir", str(data_dir), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the broker process did not start")
