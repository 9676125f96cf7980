"""Debian's RabbitMQ as a process of ours (``clients.rabbitmq``): a node of its own, on loopback
ports of its own, stopped by pid with nothing left behind.

The slow tests start a real node (``make rabbitmq`` installs Debian's package as root; without
it they skip and say so)."""

from __future__ import annotations

from pathlib import Path

import pytest
import stomp

from clients import rabbitmq
from clients.rabbitmq import RabbitMQ
from stomp_py_support import Collector, close, wait_for

NOT_INSTALLED = rabbitmq.installed_problem()
needs_rabbitmq = pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"RabbitMQ is needed: {NOT_INSTALLED}")


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs on which process ``pid`` listens (TCP, from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.add((address, int(port, 16)))
    return found


def _cmdline(pid: int) -> bytes:
    """Process ``pid``'s command line, its arguments joined by spaces (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _epmd_pids() -> set[int]:
    return {pid for pid in rabbitmq.processes_under("epmd") if Path(f"/proc/{pid}/exe").resolve().name == "epmd"}


@pytest.mark.slow
@needs_rabbitmq
def test_a_node_of_ours_answers_on_loopback_and_stop_leaves_nothing(tmp_path: Path) -> None:
    epmds_before = _epmd_pids()
    node = RabbitMQ(tmp_path, settings={"vm_memory_high_watermark.absolute": "300MB"})
    try:
        node.start()
        assert node.pid is not None and node.info["node"] == node.node
        # As a RabbitMQ user's client: host names the virtual host; no login: the STOMP default user.
        conn = stomp.Connection12([node.address], vhost="/", heartbeats=(0, 0))
        listener = Collector()
        conn.set_listener("collector", listener)
        conn.connect(wait=True)
        assert listener.connected.headers["server"].startswith("RabbitMQ/3.")
        close(conn)
        overview = node.api("overview")
        assert isinstance(overview, dict) and overview["node"] == node.node
        listening = _listening(node.pid)
        ports = {port for _, port in listening}
        assert {node.port, node.amqp_port, node.management_port, node.dist_port} <= ports
        assert {address for address, _ in listening} == {"0100007F"}, listening  # 127.0.0.1 only
        started = _epmd_pids() - epmds_before
        assert node._epmd.pid in started
        # No system epmd was started (Erlang's own is `epmd -daemon` on 4369); others of ours may run beside.
        assert all(b"-port" in _cmdline(pid) for pid in started)
        assert node.log(f"started STOMP TCP listener on 127.0.0.1:{node.port}")
        # The memory alarm, moved while the node runs (the shared-connection deadlock's mechanism):
        # below what the node uses, it is raised at once.
        used = node.memory_used()
        assert used > 10 * 2**20
        node.set_memory_high_watermark(used // 2)
        assert wait_for(lambda: node.log("memory resource limit alarm set"), 60)
        beam, epmd = node.pid, node._epmd.pid
    finally:
        node.stop()
    assert node.left_running() == [] and not rabbitmq.processes_under(str(node.run_dir))
    assert not Path(f"/proc/{beam}").exists() or "Z" in Path(f"/proc/{beam}/stat").read_text().split(")")[1][:3]
    assert epmd not in _epmd_pids()
    assert node.stop() == ""  # twice is harmless


@pytest.mark.slow
@needs_rabbitmq
def test_a_start_that_fails_stops_what_it_started(tmp_path: Path) -> None:
    node = RabbitMQ(tmp_path, settings={"no_such.setting": "1"})  # the node refuses its configuration
    with pytest.raises(rabbitmq.BrokerStartError, match="ended during startup"):
        node.start()
    assert node.left_running() == [] and not any(
        f"-port {node.epmd_port}".encode() in _cmdline(pid) for pid in _epmd_pids()
    )


def test_without_rabbitmq_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(rabbitmq, "RABBITMQ_SERVER", tmp_path / "no-such" / "rabbitmq-server")
    problem = rabbitmq.installed_problem()
    assert (
        problem is not None
        and "RabbitMQ is not installed" in problem
        and "apt-get install -y rabbitmq-server" in problem
    )
    with pytest.raises(rabbitmq.BrokerStartError, match="apt-get install -y rabbitmq-server"):
        RabbitMQ(tmp_path).start()


def test_its_configuration_takes_settings_over_the_defaults(tmp_path: Path) -> None:
    node = RabbitMQ(tmp_path, settings={"vm_memory_high_watermark.absolute": "64MB", "stomp.default_vhost": "/x"})
    text = node.config_text()
    assert "vm_memory_high_watermark.absolute = 64MB\n" in text and "relative" not in text
    assert "stomp.default_vhost = /x\n" in text and "stomp.default_vhost = /\n" not in text
    assert f"stomp.listeners.tcp.1 = 127.0.0.1:{node.port}\n" in text
    assert f"management.tcp.port = {node.management_port}\n" in text
    assert RabbitMQ(tmp_path).node != node.node  # each node its own name
