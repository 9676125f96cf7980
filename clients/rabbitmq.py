"""Debian's RabbitMQ 3.10 as a process of ours: started, restarted, stopped.

RabbitMQ beside ActiveMQ (``clients.activemq``): never the system service, a
node of our own that shares nothing with any other RabbitMQ on the machine.

Theory of operation:

- everything RabbitMQ writes or reads is in one run directory: its
  ``rabbitmq.conf``, ``enabled_plugins`` (STOMP and management), its data
  (``RABBITMQ_MNESIA_BASE``), its logs, an empty ``rabbitmq-env.conf`` (so
  ``/etc/rabbitmq``'s is not read) and ``HOME`` (the Erlang cookie);
- the node's name is unique (``minibroker-NAME-PID-RANDOM@localhost``);
- every port is a free loopback port picked at start: AMQP, STOMP,
  management HTTP, the Erlang distribution port (bound to 127.0.0.1) and the
  port of an ``epmd`` of our own, started first in the foreground as our child
  (``ERL_EPMD_PORT``; ``-start_epmd false`` so Erlang starts none of its own):
  no system epmd on 4369 is started or used;
- start waits until the AMQP, STOMP and management ports accept connections
  and the log says the boot is over;
- stop sends SIGTERM to the node's own pid (the pid file RabbitMQ writes; SIGKILL
  after a grace period), waits for the start script, stops our epmd by its
  pid, and then checks that no process of the run directory is left;
- a node made with ``quick_stop`` (the labs' and the tests' nodes, whose data
  is thrown away after) is ended with SIGKILL once its log says the management
  agent stops the statistics: by then its listeners and message stores are
  closed, and 3.10's agent waits 5 s more for a statistics refresh that cannot
  come while the node stops (3.13 skips that wait when the node stops:
  "Speed up stop_app", rabbitmq-server, April 2024).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from .activemq import BrokerStartError, alive, free_port, log_lines, log_size, package_version, wait_logged

__all__ = [
    "BrokerStopError",
    "RABBITMQ_INSTALL",
    "RABBITMQ_SERVER",
    "RabbitMQ",
    "installed_problem",
    "processes_under",
    "version",
]

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
RABBITMQ_PLUGINS = Path("/usr/lib/rabbitmq/lib")
RABBITMQ_INSTALL = "apt-get install -y rabbitmq-server"
#: The plugins every node of ours runs: the STOMP adapter and the management API (and its UI).
PLUGINS = ("rabbitmq_stomp", "rabbitmq_management")


#: The log line of a node whose boot is over (its listeners opened before it).
BOOTED = "Server startup complete"
#: The log line of a stopping node whose listeners and message stores are closed, before
#: the management agent's wait of 5 s (see ``quick_stop``).
STOPPING_STATISTICS = "Management plugin: to stop collect_statistics"


class BrokerStopError(Exception):
    """A broker's processes outlived its stop; the message names them."""


def installed_problem() -> str | None:
    """Why RabbitMQ cannot be started here (with the command that installs it), or None."""
    missing = [str(RABBITMQ_SERVER)] if not RABBITMQ_SERVER.exists() else []
    missing += [tool for tool in ("erl", "epmd") if shutil.which(tool) is None]
    if not missing and not any(RABBITMQ_PLUGINS.glob("rabbitmq_server-*/plugins/rabbitmq_stomp-*")):
        missing.append("the rabbitmq_stomp plugin")
    if missing:
        return (
            f"RabbitMQ is not installed (missing: {', '.join(missing)}). Install Debian's package as root:\n\n"
            f"    {RABBITMQ_INSTALL}\n"
        )
    return None


def version() -> str | None:
    """The installed package's version (``3.10.8-1.1+deb12u1``), or None."""
    return package_version("rabbitmq-server")


def processes_under(marker: str, *also: str) -> list[int]:
    """Pids of the live (not zombie) processes whose command line names ``marker`` (and each of ``also``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and all(word in cmdline for word in also) and state not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class RabbitMQ:
    """One RabbitMQ node in ``workdir/rabbitmq`` (its configuration, data, logs and home).

    ``port`` (STOMP), ``amqp_port``, ``management_port``, ``dist_port`` and ``epmd_port``
    are free loopback ports (picked here unless given); ``user``/``password`` log in to
    STOMP and to the management API (``management_url``, ``api``); a STOMP CONNECT without
    a login logs in as them too. ``settings`` are ``rabbitmq.conf`` lines over the
    defaults (``{"vm_memory_high_watermark.absolute": "64MB"}``)."""

    kind = "rabbitmq"
    user = "minibroker"
    password = "minibroker"

    def __init__(
        self,
        workdir: Path,
        name: str = "rabbitmq",
        settings: Mapping[str, str] | None = None,
        port: int | None = None,
        management_port: int | None = None,
        quick_stop: bool = False,
    ) -> None:
        """``quick_stop``: end the node once its stop is past its message stores (for a node whose
        data is thrown away after; see the module's notes)."""
        self.name = name
        self.quick_stop = quick_stop
        self.run_dir = Path(workdir) / "rabbitmq"
        self.node = f"minibroker-{name}-{os.getpid()}-{secrets.token_hex(3)}@localhost"
        self.port = port or free_port()
        self.amqp_port = free_port()
        self.management_port = management_port or free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.settings = dict(settings or {})
        self.pid: int | None = None  # the Erlang node's own pid (beam.smp)
        self._server: subprocess.Popen[bytes] | None = None
        self._epmd: subprocess.Popen[bytes] | None = None
        self.info: dict = {}

    @property
    def address(self) -> tuple[str, int]:
        """The STOMP listener, ``("127.0.0.1", port)``."""
        return ("127.0.0.1", self.port)

    @property
    def management_url(self) -> str:
        """The management API's base, ``http://127.0.0.1:PORT/api``."""
        return f"http://127.0.0.1:{self.management_port}/api"

    @property
    def log_path(self) -> Path:
        """The node's own log (info and up)."""
        return self.run_dir / "log" / f"{self.node}.log"

    def config_text(self) -> str:
        """The ``rabbitmq.conf`` the node runs with."""
        lines = {
            "listeners.tcp.1": f"127.0.0.1:{self.amqp_port}",
            "stomp.listeners.tcp.1": f"127.0.0.1:{self.port}",
            "stomp.default_vhost": "/",
            "stomp.default_user": self.user,
            "stomp.default_pass": self.password,
            "management.tcp.ip": "127.0.0.1",
            "management.tcp.port": str(self.management_port),
            "default_user": self.user,
            "default_pass": self.password,
            "loopback_users": "none",
            "vm_memory_high_watermark.relative": "0.4",
            "disk_free_limit.absolute": "50MB",
            "log.console": "false",
            "log.file.level": "info",
        }
        if "vm_memory_high_watermark.absolute" in self.settings:
            del lines["vm_memory_high_watermark.relative"]
        if "disk_free_limit.relative" in self.settings:
            del lines["disk_free_limit.absolute"]
        lines.update(self.settings)
        return "".join(f"{key} = {value}\n" for key, value in lines.items())

    def _env(self) -> dict[str, str]:
        run = self.run_dir
        return dict(
            os.environ,
            HOME=str(run / "home"),
            ERL_EPMD_PORT=str(self.epmd_port),
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_CONF_ENV_FILE=str(run / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(run / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(run / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(run / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(run / "mnesia"),
            RABBITMQ_LOG_BASE=str(run / "log"),
            RABBITMQ_PID_FILE=str(run / "rabbitmq.pid"),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_SERVER_START_ARGS="-start_epmd false",
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )

    def _write_files(self, keep_data: bool) -> None:
        run = self.run_dir
        if not keep_data:
            shutil.rmtree(run / "mnesia", ignore_errors=True)
        for sub in ("home", "mnesia", "log"):
            (run / sub).mkdir(parents=True, exist_ok=True)
        (run / "rabbitmq.conf").write_text(self.config_text(), encoding="utf-8")
        (run / "enabled_plugins").write_text(f"[{','.join(PLUGINS)}].\n", encoding="utf-8")
        (run / "rabbitmq-env.conf").write_text("", encoding="utf-8")

    def start(self, keep_data: bool = False, timeout: float = 120.0) -> None:
        """Start the node (on fresh data unless ``keep_data``) and wait until its ports accept."""
        problem = installed_problem()
        if problem:
            raise BrokerStartError(problem)
        if self._server is not None:
            raise BrokerStartError(f"RabbitMQ node {self.node} is already running (pid {self.pid})")
        self._write_files(keep_data)
        (self.run_dir / "rabbitmq.pid").unlink(missing_ok=True)
        started = time.monotonic()
        with open(self.run_dir / "stdout.log", "ab") as out:
            try:
                self._epmd = subprocess.Popen(
                    ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self._server = subprocess.Popen(
                    [str(RABBITMQ_SERVER)],
                    env=self._env(),
                    cwd=self.run_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self._wait_started(started + timeout)
            except BaseException:
                self.stop()
                raise
        assert self.pid is not None
        self.info = {
            "broker": "rabbitmq",
            "node": self.node,
            "pid": self.pid,
            "startup_ms": round((time.monotonic() - started) * 1000),
            "run_dir": str(self.run_dir),
        }

    def _wait_started(self, deadline: float) -> None:
        assert self._server is not None
        waiting = [self.amqp_port, self.port, self.management_port]
        pidfile = self.run_dir / "rabbitmq.pid"
        booted = False
        while waiting or self.pid is None or not booted:
            if self.pid is None and pidfile.exists():
                text = pidfile.read_text().strip()
                self.pid = int(text) if text.isdigit() else None
            waiting = [port for port in waiting if not _accepts(port)]
            booted = booted or (not waiting and bool(self.log(BOOTED)))
            if self._server.poll() is not None:
                raise BrokerStartError(
                    f"RabbitMQ node {self.node} ended during startup (status {self._server.returncode}); "
                    f"see {self.run_dir / 'stdout.log'}:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"RabbitMQ node {self.node} did not open ports {waiting} or finish its boot in time"
                )
            if waiting or self.pid is None or not booted:
                time.sleep(0.1)

    def _tail(self, lines: int = 20) -> str:
        try:
            text = (self.run_dir / "stdout.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 60.0) -> str:
        """Stop the node and our epmd by their pids (safe to call twice, and after a failed
        start); raises BrokerStopError if a process of the run directory is still alive."""
        said = []
        if self._server is not None:
            pid = self.pid or self._node_pid()
            logged = log_size(self.log_path)
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGTERM)
                said.append(f"stopped rabbitmq node {self.node} pid {pid}")
                server = self._server
                if (
                    self.quick_stop
                    and wait_logged(self.log_path, logged, STOPPING_STATISTICS, grace, lambda: server.poll() is None)
                    and alive(pid)
                ):
                    os.kill(pid, signal.SIGKILL)
            elif self._server.poll() is None:
                os.kill(self._server.pid, signal.SIGTERM)
            try:
                self._server.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                for each in [pid, self._server.pid]:
                    if each is not None and alive(each):
                        os.kill(each, signal.SIGKILL)
                self._server.wait(timeout=10)
                said.append(f"pid {pid} still alive after {grace:.0f}s: SIGKILL")
            deadline = time.monotonic() + 10
            while pid is not None and alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            self._server = None
        if self._epmd is not None:
            self._epmd.terminate()
            try:
                self._epmd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._epmd.kill()
                self._epmd.wait(timeout=10)
            self._epmd = None
        self.pid = None
        left = self.left_running()
        if left:
            raise BrokerStopError(f"RabbitMQ node {self.node}: processes left running after stop: {left}")
        return "\n".join(said)

    def _node_pid(self) -> int | None:
        """The node's pid when the pid file is not there yet: the start script's child beam."""
        for pid in processes_under(str(self.run_dir)):
            try:
                if Path(f"/proc/{pid}/exe").resolve().name.startswith("beam"):
                    return pid
            except OSError:
                continue
        return None

    def root_pids(self) -> list[int]:
        """The node's processes: its start script (the node and its helpers run below it),
        the node itself and our epmd (none once stopped)."""
        roots = [self._server.pid if self._server else None, self.pid, self._epmd.pid if self._epmd else None]
        return [pid for pid in roots if pid is not None]

    def left_running(self) -> list[int]:
        """Pids still alive of this node (its command line names the run directory) or of our epmd."""
        left = processes_under(str(self.run_dir))
        if self._epmd is not None and self._epmd.poll() is None:
            left.append(self._epmd.pid)
        return left

    def restart(self) -> None:
        """Stop, and start again on the same data (durable queues and persistent messages survive)."""
        self.stop()
        self.start(keep_data=True)

    def api(self, path: str, timeout: float = 10.0, *, method: str = "GET", body: object = None) -> object:
        """``/api/PATH`` of the management API as ``user`` (GET unless ``method``; ``body``
        sent as JSON): the decoded JSON answer, or None when it has none."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.management_url}/{path.lstrip('/')}", data=data, method=method)
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = response.read()
        return json.loads(answer) if answer else None

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl ARGS`` against this node (its own epmd and cookie; the CLI's own
        distribution port a free loopback one); its output. Raises BrokerStartError if it fails."""
        port = str(free_port())
        env = dict(
            self._env(),
            RABBITMQ_CTL_DIST_PORT_MIN=port,
            RABBITMQ_CTL_DIST_PORT_MAX=port,
            RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        ctl = RABBITMQ_SERVER.with_name("rabbitmqctl")
        done = subprocess.run(
            [str(ctl), "-n", self.node, *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise BrokerStartError(f"rabbitmqctl {' '.join(args)} failed (status {done.returncode}): {done.stderr}")
        return done.stdout

    def set_memory_high_watermark(self, limit_bytes: int) -> None:
        """Move the memory alarm's threshold while the node runs (``vm_memory_high_watermark``,
        absolute): above it, RabbitMQ blocks every connection that publishes."""
        self.ctl("set_vm_memory_high_watermark", "absolute", str(limit_bytes))

    def memory_used(self) -> int:
        """The node's memory use now, in bytes, as its memory alarm counts it."""
        answer = self.ctl("eval", "vm_memory_monitor:get_process_memory().")
        return int(answer.strip())

    def add_vhost(self, name: str) -> None:
        """A virtual host ``name`` that ``user`` may use fully (a STOMP CONNECT's ``host``
        names the virtual host on RabbitMQ: ``/`` is there from the start)."""
        quoted = urllib.parse.quote(name, safe="")
        self.api(f"vhosts/{quoted}", method="PUT", body={})
        self.api(
            f"permissions/{quoted}/{self.user}", method="PUT", body={"configure": ".*", "write": ".*", "read": ".*"}
        )

    def log(self, contains: str = "") -> list[str]:
        """The node's log lines (optionally only those containing ``contains``)."""
        return log_lines(self.log_path, contains)
