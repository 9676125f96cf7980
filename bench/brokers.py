"""Start, watch and stop the brokers that bench/compare.py measures.

- ``Ours``: ``minibroker serve`` on a free port with a fresh data directory; its
  start-up lines say which build of the core runs and on which event loop
  (``info["core"]``, ``info["loop"]``).
- ``ActiveMQ``: Debian's ActiveMQ Classic (``clients.activemq``, through the vendored
  ``harness/activemq-start.sh`` / ``activemq-stop.sh``) with the vendored
  activemq.xml, its two ports moved to free ones, its run directory inside our
  temporary directory.
- ``Relay``: the harness's relay (``harness/stomp_relay.py``), the floor: frames
  forwarded, nothing else.
- ``RssSampler``: one thread that reads VmRSS of every broker pid from
  ``/proc/PID/status`` ten times a second and keeps the peak per window.

Every broker is stopped by ``stop()``, which is safe to call twice and after
a failed start; compare.py calls it from a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import re
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

AMQ_STOMP_PORT = 61613  # the vendored activemq.xml's, until a start moves it to a free one


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


#: The start-up lines of ``serve`` (at ``--log-level info``) naming the build and the loop in use.
CORE_LINE = re.compile(r"minibroker: (core: .+)$", re.M)
LOOP_LINE = re.compile(r"; event loop: (.+)$", re.M)


def runtime_of(log_text: str) -> dict[str, str | None]:
    """What ``serve``'s start-up lines say runs: ``{"core": "compiled (mypyc 1.x)"
    or "interpreted (...)", "loop": "uvloop 0.21.0" or "asyncio (...)"}`` (None when a
    line is missing)."""
    core = CORE_LINE.search(log_text)
    loop = LOOP_LINE.search(log_text)
    return {
        "core": core.group(1).removeprefix("core: ").strip() if core else None,
        "loop": loop.group(1).strip() if loop else None,
    }


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGTERM the child if compare.py itself is killed (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def start_listening(name: str, argv: list[str], log_path: Path, port: int, timeout: float) -> subprocess.Popen:
    """Start ``argv`` in a session of its own (its output in ``log_path``; SIGTERMed if we
    die) and wait until ``port`` accepts connections; BrokerStartError if it exits or
    ``timeout`` passes first."""
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    while not port_open(port):
        if proc.poll() is not None:
            raise BrokerStartError(
                f"{name}: `{' '.join(argv)}` exited with status {proc.returncode}:\n{_tail(log_path)}"
            )
        if time.monotonic() - t0 > timeout:
            proc.kill()
            proc.wait(5)
            raise BrokerStartError(
                f"{name}: port {port} not open after {timeout:.0f} s; log {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(0.02)
    return proc


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s (``proc.returncode`` says which ended it: -9 for SIGKILL)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


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

    def root_pids(self) -> list[int]:
        """Our process and, with ``console_page``, the browser that keeps the page open (its client)."""
        return [p.pid for p in (self.proc, self.page.proc if self.page else None) if p is not None]

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
            # info: the start-up lines name the core's build and the event loop; past them the
            # broker logs only connections opening and closing, a few lines per rep
            "--log-level",
            "info",
        ]
        if self.config:
            argv += ["--config", self.config]
        if self.loop:
            argv += ["--loop", self.loop]
        t0 = time.monotonic()
        self.proc = start_listening(self.name, argv, self.log_path, self.port, timeout)
        startup_ms = round((time.monotonic() - t0) * 1000)
        runtime = runtime_of(_tail(self.log_path, 50))
        while runtime["loop"] is None and time.monotonic() - t0 < timeout and self.proc.poll() is None:
            time.sleep(0.02)  # the port opens just before the line naming the loop is written
            runtime = runtime_of(_tail(self.log_path, 50))
        self.info = {
            "broker": self.name,
            "pid": self.pid,
            "port": self.port,
            "argv": " ".join(argv),
            "startup_ms": startup_ms,
            "rss_mb_at_start": proc_status_mb(self.pid).get("VmRSS"),
            **runtime,
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
        terminate(proc)
        return (
            f"stopped {self.name} pid {proc.pid}, exit status {proc.returncode} "
            f"(rss before stop {mem.get('VmRSS')} MB, peak {mem.get('VmHWM')} MB)"
        )


class Relay:
    """The harness's loopback floor (``harness/stomp_relay.py``): a single-process asyncio
    STOMP relay that splits frames and forwards their bytes, with no broker behind it (no
    store, acknowledgements, prefetch or persistence). What any asyncio broker pays per
    message at the least, on the same harness and machine."""

    kind = "relay"

    def __init__(self, workdir: Path, name: str = "relay") -> None:
        self.name = name
        self.port = free_port()
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def root_pids(self) -> list[int]:
        """The relay's process."""
        return [self.proc.pid] if self.proc else []

    def start(self, timeout: float = 20.0) -> None:
        argv = [sys.executable, str(HARNESS / "stomp_relay.py"), "--port", str(self.port), "--max-seconds", "14400"]
        t0 = time.monotonic()
        self.proc = start_listening(self.name, argv, self.log_path, self.port, timeout)
        self.info = {
            "broker": self.name,
            "pid": self.pid,
            "port": self.port,
            "startup_ms": round((time.monotonic() - t0) * 1000),
            "rss_mb_at_start": proc_status_mb(self.pid).get("VmRSS"),
        }

    def stop(self) -> str:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return ""
        terminate(proc)
        return f"stopped {self.name} pid {proc.pid}, exit status {proc.returncode}"


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


#: The vendored harness's activemq.xml (STOMP on 61613, OpenWire on 61616).
AMQ_HARNESS_CONF = HARNESS / "activemq" / "conf" / "activemq.xml"
#: Its two transport connectors, whose ports ``on_free_ports`` replaces.
AMQ_CONNECTORS = {
    "stomp": re.compile(r'uri="stomp://127\.0\.0\.1:\d+"'),
    "tcp": re.compile(r'uri="tcp://127\.0\.0\.1:\d+"'),
}


def on_free_ports(conf: Path, copy: Path) -> int:
    """Write to ``copy`` the activemq.xml ``conf`` with its STOMP and OpenWire connectors
    on free loopback ports, nothing else changed; returns the STOMP port.

    The harness's file names 61613 and 61616, which a broker of ours (``make run``) or
    another ActiveMQ on the machine may hold: a run on its own ports measures the same
    broker and configuration without stopping anyone else's."""
    text = conf.read_text(encoding="utf-8")
    ports = {scheme: free_port() for scheme in AMQ_CONNECTORS}
    for scheme, pattern in AMQ_CONNECTORS.items():
        text, found = pattern.subn(f'uri="{scheme}://127.0.0.1:{ports[scheme]}"', text)
        if found != 1:
            raise BrokerStartError(f"{conf}: expected one {scheme}:// transport connector on 127.0.0.1, found {found}")
    copy.write_text(text, encoding="utf-8")
    return ports["stomp"]


class ActiveMQ(activemq.ActiveMQ):
    """Debian's ActiveMQ Classic with the vendored activemq.xml (or ``conf``), its STOMP and
    OpenWire connectors moved to free loopback ports (``on_free_ports``) at each start."""

    def __init__(
        self, workdir: Path, name: str = "activemq", conf: Path | None = None, heap: str | None = None
    ) -> None:
        """``conf``: an activemq.xml instead of the vendored one; ``heap``: JVM heap options."""
        super().__init__(workdir, name, conf, heap, port=AMQ_STOMP_PORT)
        self.source_conf = conf or AMQ_HARNESS_CONF
        self.workdir = workdir

    @staticmethod
    def check_installed() -> None:
        problem = activemq.installed_problem()
        if problem:
            raise BrokerStartError(
                f"{problem}\nthen run again, or run without --with-activemq to compare with the reference numbers."
            )

    version = staticmethod(activemq.version)

    def root_pids(self) -> list[int]:
        """The JVM (the start script has exited)."""
        return [self.pid] if self.pid else []

    def start(self, keep_data: bool = False) -> None:
        self.check_installed()
        copy = self.workdir / f"{self.name}-activemq.xml"
        self.port = on_free_ports(self.source_conf, copy)
        self.conf = copy
        super().start(keep_data)
        self.info["port"] = self.port


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
