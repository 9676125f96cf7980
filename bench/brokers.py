"""Start, watch and stop the brokers that bench/compare.py measures.

- ``Ours``: ``minibroker serve`` on a free port with a fresh data directory.
- ``ActiveMQ``: Debian's ActiveMQ Classic (``clients.activemq``, through the vendored
  ``harness/activemq-start.sh`` / ``activemq-stop.sh``) with the vendored
  activemq.xml (STOMP on 61613), its run directory inside our temporary directory.
- ``RssSampler``: one thread that reads VmRSS of every broker pid from
  ``/proc/PID/status`` ten times a second and keeps the peak per window.

Every broker is stopped by ``stop()``, which is safe to call twice and after
a failed start; compare.py calls it from a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HARNESS = Path(__file__).resolve().parent / "harness"
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))

from stomp_bench import proc_mem  # noqa: E402  (vendored harness)

from clients import activemq, rabbitmq  # noqa: E402
from clients.activemq import AMQ_INSTALL, BrokerStartError, free_port  # noqa: E402,F401  (bench's callers import them here)

AMQ_STOMP_PORT = 61613
AMQ_OPENWIRE_PORT = 61616  # also bound by the vendored activemq.xml


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def proc_status_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MB ({} when the process is gone): the harness's own reader."""
    return proc_mem(pid)


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-n:])
    except OSError:
        return ""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGTERM the child if compare.py itself is killed (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Ours:
    """``minibroker serve`` in a child process of ours."""

    kind = "ours"

    def __init__(
        self,
        name: str,
        workdir: Path,
        config: str | None = None,
        port: int | None = None,
        console_page: bool = False,
        loop: str | None = None,
    ) -> None:
        """``console_page``: serve the web console and keep one page of it open in a
        headless Chromium while the broker runs (what the console costs the broker).
        ``loop``: ``serve --loop`` (else the configuration's ``transport.event_loop``)."""
        self.name = name
        self.config = config
        self.loop = loop
        self.port = port or free_port()
        self.console_port = free_port() if console_page else 0
        self.page: ConsolePage | None = None
        self.workdir = workdir
        self.data_dir = workdir / f"{name.replace(':', '-')}-data"
        self.log_path = workdir / f"{name.replace(':', '-')}.log"
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    @staticmethod
    def command() -> list[str]:
        exe = Path(sys.executable).parent / "minibroker"
        if exe.exists():
            return [str(exe)]
        return [sys.executable, "-m", "clients.cli"]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_tail(self, n: int = 20) -> str:
        return _tail(self.log_path, n)

    def exit_status(self) -> int | None:
        """The broker's exit status if it has died, else None."""
        return self.proc.poll() if self.proc else None

    def data_bytes(self) -> int:
        """Bytes in the data directory: 0 while the broker keeps nothing on disk."""
        return sum(p.stat().st_size for p in self.data_dir.rglob("*") if p.is_file())

    def start(self, timeout: float = 20.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = self.command() + [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--websocket-port",
            "0",
            "--console-port",
            str(self.console_port),
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            "warning",
        ]
        if self.config:
            argv += ["--config", self.config]
        if self.loop:
            argv += ["--loop", self.loop]
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"{self.name}: `{' '.join(argv)}` exited with status {self.proc.returncode}:\n"
                    f"{_tail(self.log_path)}"
                )
            if time.monotonic() - t0 > timeout:
                raise BrokerStartError(
                    f"{self.name}: port {self.port} not open after {timeout:.0f} s; "
                    f"log {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.02)
        self.info = {
            "broker": self.name,
            "pid": self.pid,
            "port": self.port,
            "argv": " ".join(argv),
            "startup_ms": round((time.monotonic() - t0) * 1000),
            "rss_mb_at_start": proc_status_mb(self.pid).get("VmRSS"),
        }
        if self.console_port:
            while not port_open(self.console_port):
                if time.monotonic() - t0 > timeout:
                    raise BrokerStartError(f"{self.name}: console port {self.console_port} not open")
                time.sleep(0.02)
            self.page = ConsolePage(
                f"http://127.0.0.1:{self.console_port}/", self.workdir / f"{self.name.replace(':', '-')}-chromium"
            )
            self.info["console_page"] = self.page.url

    def stop(self) -> str:
        if self.page is not None:
            self.page.stop()
            self.page = None
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return ""
        mem = proc_status_mb(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        return f"stopped {self.name} pid {proc.pid} (rss before stop {mem.get('VmRSS')} MB, peak {mem.get('VmHWM')} MB)"


class ConsolePage:
    """One page open in Debian's headless Chromium (its own fresh profile), until ``stop``."""

    CHROMIUM = "/usr/bin/chromium"
    FLAGS = (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    )

    def __init__(self, url: str, profile: Path) -> None:
        if not Path(self.CHROMIUM).exists():
            raise BrokerStartError("the console page needs Chromium (apt-get install chromium; make browser)")
        self.url = url
        self.proc = subprocess.Popen(
            [self.CHROMIUM, *self.FLAGS, f"--user-data-dir={profile}", url],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def stop(self) -> None:
        """End the browser and its helper processes (its own process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class ActiveMQ(activemq.ActiveMQ):
    """Debian's ActiveMQ Classic with the vendored activemq.xml (STOMP on 61613, OpenWire on 61616)."""

    port = AMQ_STOMP_PORT

    def __init__(
        self, workdir: Path, name: str = "activemq", conf: Path | None = None, heap: str | None = None
    ) -> None:
        """``conf``: an activemq.xml instead of the vendored one; ``heap``: JVM heap options."""
        super().__init__(workdir, name, conf, heap, port=AMQ_STOMP_PORT)

    @staticmethod
    def check_installed() -> None:
        problem = activemq.installed_problem()
        if problem:
            raise BrokerStartError(
                f"{problem}\nthen run again, or run without --with-activemq to compare with the reference numbers."
            )
        for port in (AMQ_STOMP_PORT, AMQ_OPENWIRE_PORT):
            if port_open(port):
                raise BrokerStartError(
                    f"port {port} is already in use on 127.0.0.1 (`make run`, or another ActiveMQ?); the vendored "
                    f"activemq.xml needs {AMQ_STOMP_PORT} (STOMP) and {AMQ_OPENWIRE_PORT} (OpenWire). Stop it first "
                    f"(`ss -ltnp 'sport = :{port}'` shows who holds it)."
                )

    version = staticmethod(activemq.version)

    def start(self, keep_data: bool = False) -> None:
        self.check_installed()
        super().start(keep_data)


class RabbitMQ(rabbitmq.RabbitMQ):
    """Debian's RabbitMQ 3.10: a node of our own (``clients/rabbitmq.py``) on free loopback
    ports, with the virtual host the harness's CONNECT names (``host:localhost``)."""

    def __init__(self, workdir: Path, name: str = "rabbitmq") -> None:
        super().__init__(workdir, name)

    @staticmethod
    def check_installed() -> None:
        problem = rabbitmq.installed_problem()
        if problem:
            raise BrokerStartError(f"{problem}\nthen run again, or run without --with-rabbitmq.")

    version = staticmethod(rabbitmq.version)

    def start(self, keep_data: bool = False, timeout: float = 120.0) -> None:
        self.check_installed()
        super().start(keep_data, timeout)
        self.add_vhost("localhost")


class RssSampler(threading.Thread):
    """Peak VmRSS per pid between ``reset(pid)`` and ``peak(pid)``, sampled every ``interval`` s."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.interval = interval
        self._peaks: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def watch(self, pid: int) -> None:
        with self._lock:
            self._peaks.setdefault(pid, 0.0)

    def reset(self, pid: int) -> None:
        with self._lock:
            self._peaks[pid] = proc_status_mb(pid).get("VmRSS", 0.0)

    def peak(self, pid: int) -> float:
        now = proc_status_mb(pid).get("VmRSS", 0.0)
        with self._lock:
            return max(self._peaks.get(pid, 0.0), now)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            with self._lock:
                pids = list(self._peaks)
            for pid in pids:
                rss = proc_status_mb(pid).get("VmRSS")
                if rss is not None:
                    with self._lock:
                        if rss > self._peaks.get(pid, 0.0):
                            self._peaks[pid] = rss

    def stop(self) -> None:
        self._stop_event.set()
