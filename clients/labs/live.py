"""A lab's real server: ``minibroker.edge.server.serve`` in a background thread (``lab run --live``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from minibroker import eventloop
from minibroker.config import BrokerConfig

from .looplag import LoopLag
from .model import LabError

#: How long ``stop`` waits for the broker's thread to close the server, the store and the trace.
STOP_DEADLINE_SECONDS = 120.0

__all__ = ["LiveBroker"]


class LiveBroker:
    """``minibroker.edge.server.serve`` in a background thread, stoppable and restartable."""

    def __init__(self, config: BrokerConfig, lag: LoopLag | None = None) -> None:
        self.config = config
        #: The broker loop's scheduling delay, sampled while it runs (across restarts).
        self.lag = lag or LoopLag()
        #: Called after a restart (the run's timeline notes it).
        self.on_restart: Callable[[LiveBroker], None] | None = None
        self.server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None

    @property
    def port(self) -> int:
        return int(self.server.port)

    def start(self) -> None:
        from minibroker.edge import serve

        self._ready.clear()

        def main() -> None:
            async def go() -> None:
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()

                def ready(server: Any) -> None:
                    self.server = server
                    self._ready.set()

                sampler = asyncio.create_task(self.lag.sample())
                try:
                    await serve(self.config, ready=ready, stop=self._stop)
                finally:
                    sampler.cancel()

            try:  # MINIBROKER_LOOP, when set, chooses the loop (the test suite runs on both)
                eventloop.run(go(), eventloop.from_environment(self.config.transport.event_loop))
            except BaseException as exc:  # reported by start()
                self.error = exc
                self._ready.set()

        self._thread = threading.Thread(target=main, name="lab-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self.error is not None:
            raise LabError(f"the live broker did not start: {self.error!r}")

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the broker's event loop and return its result."""
        assert self._loop is not None

        async def wrapper() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(10)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)  # (a broker whose store failed stopped by itself)
        if self._thread is not None:
            # Closing writes the trace's last events and the store's last records: on a
            # loaded machine that can take long, and a caller reads both right after.
            self._thread.join(STOP_DEADLINE_SECONDS)
            if self._thread.is_alive():
                raise RuntimeError(f"the broker did not stop within {STOP_DEADLINE_SECONDS:.0f} s")
        self.server = None
        self._loop = self._stop = self._thread = None

    def restart(self) -> None:
        """Stop and start again on the same data directory (and a new port)."""
        self.stop()
        self.start()
        if self.on_restart is not None:
            self.on_restart(self)
