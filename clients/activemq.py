"""Debian's ActiveMQ Classic as a process of ours: started, restarted, stopped.

The benchmarks (``bench/brokers.py``) and ``lab run --against activemq``
(``clients.labs.against``) both start it through the shared harness's
scripts, ``bench/harness/activemq-start.sh`` and ``activemq-stop.sh``: the
JVM flags of Debian's start script, a run directory of our own (data, log,
pid file), wait until the STOMP port accepts connections, and stop only the
pid the start wrote. The broker's configuration is any ``activemq.xml``; it
names the ports (``port`` is the STOMP port to wait for).

A broker made with ``quick_stop`` (the labs' and the tests' brokers) is stopped
here instead of by the stop script: SIGTERM, as the script sends it; once the
broker logs that it is shut down (its connectors and KahaDB closed: what a
restart on the same data needs), the JVM is ended with SIGKILL rather than
waited for through the second or more of its own exit that follows.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "alive",
    "free_port",
    "AMQ_HOME",
    "AMQ_INSTALL",
    "ActiveMQ",
    "BrokerStartError",
    "HARNESS",
    "installed_problem",
    "jolokia_problem",
    "JOLOKIA_CLASSPATH",
    "log_lines",
    "log_size",
    "logged_since",
    "wait_logged",
    "package_version",
    "version",
]

#: The shared benchmark harness, vendored in this checkout.
HARNESS = Path(__file__).resolve().parents[1] / "bench" / "harness"
AMQ_HOME = Path("/usr/share/activemq")
AMQ_JAR = AMQ_HOME / "bin" / "activemq.jar"
AMQ_INSTALL = "apt-get install -y activemq"
#: Jolokia as ActiveMQ's web console serves it, from Debian's packages (the console is not in
#: Debian's activemq): Jetty 9, the servlet API and Jolokia's servlet (``write_xml(jolokia_port=...)``).
JOLOKIA_INSTALL = "apt-get install -y libjetty9-java libjolokia-core-java"
JOLOKIA_CLASSPATH = tuple(
    Path("/usr/share/java") / f"{jar}.jar"
    for jar in (
        "jetty9-server",
        "jetty9-servlet",
        "jetty9-http",
        "jetty9-io",
        "jetty9-util",
        "jetty9-security",
        "servlet-api",
        "jolokia-core",
        "json-simple",
    )
)


#: The broker's last log line once its stop is over: "Apache ActiveMQ 5.17.2 (localhost, ID:...) is shutdown".
SHUT_DOWN = ") is shutdown"
#: How long a stop waits for the broker's shutdown (as the stop script waits for its JVM) before SIGKILL.
STOP_GRACE = 30.0


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (a zombie, ended but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class BrokerStartError(Exception):
    """A broker could not be started; the message says why and what to do."""


def installed_problem() -> str | None:
    """Why ActiveMQ cannot be started here (with the command that installs it), or None."""
    missing = [what for what, ok in (("java", shutil.which("java")), (str(AMQ_JAR), AMQ_JAR.exists())) if not ok]
    if missing:
        return (
            f"ActiveMQ is not installed (missing: {', '.join(missing)}). Install Debian's package as root:\n\n"
            f"    {AMQ_INSTALL}\n"
        )
    if not (HARNESS / "activemq-start.sh").exists():
        return f"the ActiveMQ start script is not here ({HARNESS}): run from a checkout of minibroker"
    return None


def jolokia_problem() -> str | None:
    """Why ActiveMQ cannot serve Jolokia here (with the command that installs it), or None."""
    missing = [str(jar) for jar in JOLOKIA_CLASSPATH if not jar.exists()]
    if missing:
        return f"Jolokia's jars are not installed (missing: {', '.join(missing)}). As root:\n\n    {JOLOKIA_INSTALL}\n"
    return None


def package_version(package: str) -> str | None:
    """The installed version of Debian package ``package``, or None."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
        return out.stdout.strip() or None
    except OSError:
        return None


def log_lines(path: Path, contains: str = "") -> list[str]:
    """A broker's log lines (optionally only those containing ``contains``); none if it has no log yet."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if contains in line]


def log_size(path: Path) -> int:
    """The size of a broker's log now, in bytes (0 if it has none yet): an offset for ``logged_since``."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def logged_since(path: Path, offset: int, text: str) -> bool:
    """Whether a broker's log has ``text`` past its first ``offset`` bytes."""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            return text.encode() in log.read()
    except OSError:
        return False


def wait_logged(path: Path, offset: int, text: str, seconds: float, running: Callable[[], bool]) -> bool:
    """Until a broker's log has ``text`` past its first ``offset`` bytes (True), or ``running()``
    is false or ``seconds`` have passed (False)."""
    deadline = time.monotonic() + seconds
    while running() and time.monotonic() < deadline:
        if logged_since(path, offset, text):
            return True
        time.sleep(0.05)
    return logged_since(path, offset, text)


def version() -> str | None:
    """The installed package's version (``5.17.2+dfsg-2``), or None."""
    return package_version("activemq")


class ActiveMQ:
    """One ActiveMQ broker in ``workdir/activemq`` (its data, log and pid file)."""

    kind = "activemq"

    def __init__(
        self,
        workdir: Path,
        name: str = "activemq",
        conf: Path | None = None,
        heap: str | None = None,
        port: int = 61613,
        classpath: tuple[Path, ...] = (),
        quick_stop: bool = False,
    ) -> None:
        """``conf``: an activemq.xml instead of the harness's (which listens on 61613 and
        61616); ``heap``: JVM heap options; ``port``: the STOMP port ``conf`` names;
        ``classpath``: jars the broker's classpath needs beyond its own (``JOLOKIA_CLASSPATH``);
        ``quick_stop``: end the JVM once the broker has logged its shutdown (see the module's notes)."""
        self.name = name
        self.run_dir = workdir / "activemq"
        self.conf = conf
        self.heap = heap
        self.port = port
        self.classpath = classpath
        self.quick_stop = quick_stop
        self.pid: int | None = None
        self.info: dict = {}

    @property
    def log_path(self) -> Path:
        """The broker's own log (log4j, INFO and up)."""
        return self.run_dir / "data" / "activemq.log"

    def _env(self, keep_data: bool = False) -> dict[str, str]:
        env = dict(os.environ, AMQ_RUN=str(self.run_dir), AMQ_WAIT_PORT=str(self.port))
        if keep_data:
            env["AMQ_KEEP_DATA"] = "1"
        if self.conf is not None:
            env["AMQ_CONF"] = str(self.conf)
        if self.heap is not None:
            env["AMQ_HEAP"] = self.heap
        return env

    def _link_classpath(self) -> None:
        """The extra jars in the broker's ``lib/extra`` (ActiveMQ's ``Main`` puts every jar of
        ``${activemq.base}/lib/extra`` on its classpath; the run directory is that base)."""
        extra = self.run_dir / "lib" / "extra"
        extra.mkdir(parents=True, exist_ok=True)
        for jar in self.classpath:
            link = extra / jar.name
            if not link.is_symlink():
                link.symlink_to(jar)

    def start(self, keep_data: bool = False) -> None:
        """Start the broker (on a fresh data directory unless ``keep_data``) and wait for its port."""
        problem = installed_problem()
        if problem:
            raise BrokerStartError(problem)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._link_classpath()
        try:
            p = subprocess.run(
                ["bash", str(HARNESS / "activemq-start.sh")],
                env=self._env(keep_data),
                capture_output=True,
                text=True,
                timeout=150,
            )
        finally:  # even on failure or interruption: stop() must find what the script left running
            pidfile = self.run_dir / "activemq.pid"
            if pidfile.exists():
                with contextlib.suppress(ValueError):
                    self.pid = int(pidfile.read_text().strip())
        if p.returncode != 0:
            raise BrokerStartError(f"activemq-start.sh failed (status {p.returncode}):\n{p.stderr}{p.stdout}")
        self.info = json.loads(p.stdout.strip().splitlines()[-1])
        self.pid = int(self.info["pid"])

    def stop(self) -> str:
        """Stop the broker the start left running (safe to call twice, and after a failed start)."""
        if self.pid is None:
            return ""
        pid, self.pid = self.pid, None
        if self.quick_stop:
            return self._stop_once_shut_down(pid)
        p = subprocess.run(
            ["bash", str(HARNESS / "activemq-stop.sh")], env=self._env(), capture_output=True, text=True, timeout=60
        )
        return (p.stdout + p.stderr).strip()

    def _stop_once_shut_down(self, pid: int) -> str:
        """SIGTERM to the JVM ``pid``; SIGKILL once the broker has logged its shutdown since
        (or after ``STOP_GRACE`` seconds); then wait until the JVM is gone."""
        pidfile = self.run_dir / "activemq.pid"
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            cmdline = b""
        if not alive(pid) or b"activemq.jar" not in cmdline:  # gone, or the pid is another process's now
            pidfile.unlink(missing_ok=True)
            return f"activemq pid {pid} not running"
        logged = log_size(self.log_path)
        os.kill(pid, signal.SIGTERM)
        shut_down = wait_logged(self.log_path, logged, SHUT_DOWN, STOP_GRACE, lambda: alive(pid))
        said = f"stopped activemq pid {pid}"
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            said += " (SIGKILL once shut down)" if shut_down else f" (SIGKILL: no shutdown logged in {STOP_GRACE:.0f}s)"
        pidfile.unlink(missing_ok=True)
        return said

    def restart(self) -> None:
        """Stop, and start again on the same data (persistent messages survive)."""
        self.stop()
        self.start(keep_data=True)

    def log(self, contains: str = "") -> list[str]:
        """The broker's log lines (optionally only those containing ``contains``)."""
        return log_lines(self.log_path, contains)
