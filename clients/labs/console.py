"""``lab run --console``: the web console on a lab's broker, so a class watches the run.

Theory of operation
-------------------
A live run (``--live``) starts a real server per configuration
(``LabRun.live_broker``), and those brokers run with the console off
(``BrokerConfig.on_free_ports``). With ``--console`` the runner hands each of
them a ``LabConsole``: every broker of the lab listens for the console on the
same port (8161 when it is free, else a free one, or the port asked for), so
one page, left open, follows the lab from one configuration to the next (the
page reconnects on its own when a broker stops and the next one starts). The
address is printed when the first broker is up.

When a run ends its broker is kept (not stopped) until the next run starts
one, and the last one until ``hold()`` returns: Ctrl-C, or ``--console-hold
SECONDS``. So the class can look at what the run left behind after the
verdicts are printed.

On the virtual clock a lab runs in seconds, too fast to watch: ``replay``
starts one broker that serves the console with the runs' recordings, which the
page plays with its own clock and controls (``clients.labs.replay``); then
``hold`` counts from the end of the replay as the first page plays it.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minibroker.config import ANY_PORT, BrokerConfig
from minibroker.ops import STATISTICS_PREFIX

from .live import LiveBroker
from .replay import RecordedReplay

__all__ = ["ACTIVEMQ_CONSOLE_PORT", "LabConsole", "console_port_free"]

#: The console's usual port (ActiveMQ's web console), taken when it is free.
ACTIVEMQ_CONSOLE_PORT = 8161


def console_port_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be listened on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


class LabConsole:
    """The console's port across a lab's brokers, and the last broker kept for the class.

    ``port`` is the one asked for: None for 8161 if free else any free port,
    0 for any free port, or a port number.
    """

    def __init__(self, port: int | None = None, *, host: str = "127.0.0.1", out: Callable[[str], None] = print) -> None:
        if port is None:
            port = ACTIVEMQ_CONSOLE_PORT if console_port_free(host, ACTIVEMQ_CONSOLE_PORT) else 0
        self.host = host
        #: The port the next broker listens on: ANY_PORT until the first one bound.
        self.port = port or ANY_PORT
        self._out = out
        self._kept: Any = None
        self._kept_workdir: Path | None = None
        self._showing = ""
        self._replay: RecordedReplay | None = None

    @property
    def url(self) -> str | None:
        """The console's address once a broker serves it."""
        return None if self.port == ANY_PORT else f"http://{self.host}:{self.port}/"

    def configure(self, config: BrokerConfig) -> BrokerConfig:
        """``config`` (already on free ports) with the console on this console's port."""
        return config.replace(console={"host": self.host, "port": self.port})

    def started(self, live: Any, run_name: str) -> None:
        """A lab broker is up: remember its console port, say where to look."""
        first = self.port == ANY_PORT
        self.port = int(live.server.console_port)
        if first:
            self._out(
                f"  console: {self.url} (open it now; "
                + (
                    "the replay starts when the page does)"
                    if run_name.startswith("replay")
                    else "it follows every run of the lab)"
                )
            )
        self._showing = run_name if run_name.startswith("replay") else f"{run_name} run"
        self._out(f"  console: now showing the {self._showing}")

    def show_timeline(self, live: Any, run_name: str, phases: Any) -> None:
        """The live broker's Broker statistics carry the run's timeline as ``lab`` (the run,
        its seconds so far, each thing that happened: ``phases``, the feed ``--watch``
        draws), so the page draws it above its charts as it does a replay's phases."""

        def install() -> None:
            broker = live.server.broker
            own = broker.statistics_source

            def answer(b: Any, address: str, scope: Any) -> list[dict[str, Any]] | None:
                replies = own(b, address, scope)
                if replies and address == STATISTICS_PREFIX + "Broker":
                    replies[0]["lab"] = {
                        "run": run_name,
                        "elapsed": round(phases.elapsed(), 3),
                        "events": [{"t": round(t, 3), "text": text} for t, text in phases.items()],
                    }
                return replies

            broker.statistics_source = answer

        live.call(install)

    def keep(self, live: Any, workdir: Path) -> None:
        """The run is over: keep its broker serving the console until the next one starts."""
        self.release(unless=workdir)
        self._kept, self._kept_workdir = live, workdir

    def holds(self, workdir: Path) -> bool:
        """Whether ``workdir`` belongs to the broker kept serving (not to be removed yet)."""
        return self._kept is not None and self._kept_workdir == workdir

    def release(self, unless: Path | None = None) -> None:
        """Stop the kept broker (another takes its port) and remove its run's directory."""
        live, workdir = self._kept, self._kept_workdir
        self._kept = self._kept_workdir = None
        if live is not None:
            live.stop()
        if workdir is not None and workdir != unless:
            shutil.rmtree(workdir, ignore_errors=True)

    def replay(self, replay: RecordedReplay, workdir: Path) -> RecordedReplay:
        """Serve the console with ``replay``'s recordings, for each page to play."""
        self._replay = replay
        config = self.configure(
            BrokerConfig()
            .on_free_ports()
            .replace(transport={"host": "127.0.0.1"}, broker={"data_dir": str(workdir / "data")})
        )
        live = LiveBroker(config)
        live.start()

        def install() -> None:
            live.server.broker.statistics_source = replay.answer

        live.call(install)
        runs = len(replay.recordings)
        self.started(
            live,
            f"replay ({runs} run{'s' if runs != 1 else ''}, {replay.duration:.0f} lab seconds at {replay.speed:g}x)",
        )
        self.keep(live, workdir)
        return replay

    def hold(self, seconds: float | None) -> None:
        """Keep the last broker serving: ``seconds``, or until Ctrl-C when None; then stop it."""
        try:
            # Ctrl-C is taken from before the line that invites it: one pressed as soon as it shows
            # stops the broker as one pressed later does (not as an interrupted command, exit 130).
            with contextlib.suppress(KeyboardInterrupt):
                if self._kept is not None:
                    replay, since = self._replay, time.monotonic()
                    after = " after the replay's end (as the first page plays it)" if replay is not None else ""
                    self._out(
                        f"  console: {self.url} keeps serving the {self._showing}; "
                        + (f"for {seconds:g} s{after}" if seconds is not None else "Ctrl-C to stop")
                    )
                    while seconds is None or time.monotonic() < (deadline := self._deadline(seconds, since)):
                        time.sleep(0.2 if seconds is None else max(0.0, min(0.2, deadline - time.monotonic())))
        finally:
            self.release()

    def _deadline(self, seconds: float, since: float) -> float:
        """When ``hold(seconds)`` ends: ``seconds`` after the replay's end as the first page
        plays it at the speed asked for (before any page opens: as if one opened at ``since``),
        or after ``since`` for a live run's broker."""
        replay = self._replay
        if replay is None:
            return since + seconds
        return (replay.ends() or since + replay.duration / replay.speed) + seconds
