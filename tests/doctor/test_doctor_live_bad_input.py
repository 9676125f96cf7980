"""``doctor --live`` on what it cannot read: one clear line each, exit status 2, no traceback."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from clients.cli import main
from tests.broker_support import RunningBroker


def _serve_tcp(answer: bytes) -> Iterator[int]:
    """A TCP server on loopback that reads a little, writes ``answer`` and keeps the connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.settimeout(5)
            try:
                conn.recv(4096)
                conn.sendall(answer)
            except OSError:
                pass
            held.append(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def _start_http(answer: Callable[[str], tuple[int, bytes]]) -> HTTPServer:
    """An HTTP server on loopback answering each GET with ``answer(path)``: (status, body)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _stop_http(server: HTTPServer) -> None:
    server.shutdown()
    server.server_close()


def _json_answers(answers: dict[str, Any]) -> Callable[[str], tuple[int, bytes]]:
    """Each path of ``answers`` as its JSON, any other a 404."""
    return lambda path: (200, json.dumps(answers[path]).encode()) if path in answers else (404, b"")


def _serve_http(status: int, body: bytes = b"") -> Iterator[int]:
    server = _start_http(lambda path: (status, body))
    yield server.server_address[1]
    _stop_http(server)


def _doctor(capsys: pytest.CaptureFixture[str], url: str, *more: str) -> tuple[int, str]:
    status = main(["doctor", "--live", url, "--window", "2", "--timeout", "1", *more])
    err = capsys.readouterr().err
    return status, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_not_a_broker(capsys: pytest.CaptureFixture[str]) -> None:
    for port in _serve_tcp(b"HTTP/1.0 400 Bad Request\r\n\r\n"):
        status, err = _doctor(capsys, f"stomp://127.0.0.1:{port}")
    assert status == 2
    assert "cannot read a STOMP broker" in _one_line(err)


def test_login_refused(capsys: pytest.CaptureFixture[str]) -> None:
    refusal = b"ERROR\nmessage:User name [bad] or password is invalid.\n\n\x00"
    for port in _serve_tcp(refusal):
        status, err = _doctor(capsys, f"stomp://bad:wrong@127.0.0.1:{port}")
    assert status == 2
    assert "refused the login" in _one_line(err) and "invalid" in err


def test_activemq_without_the_statistics_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    connected = b"CONNECTED\nserver:ActiveMQ/5.17.2\nversion:1.2\n\n\x00"
    for port in _serve_tcp(connected):
        status, err = _doctor(capsys, f"stomp://127.0.0.1:{port}")
    assert status == 2
    line = _one_line(err)
    assert "statistics plugin is not configured" in line and "<statisticsBrokerPlugin/>" in line


@pytest.mark.parametrize(("code", "words"), [(401, "refused the login"), (404, "HTTP 404")])
def test_management_api_answers(code: int, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    for port in _serve_http(code):
        status, err = _doctor(capsys, f"http://guest:guest@127.0.0.1:{port}/")
    assert status == 2
    assert words in _one_line(err)


def test_http_that_is_no_broker(capsys: pytest.CaptureFixture[str]) -> None:
    for port in _serve_http(200, b"<html>hello</html>"):
        status, err = _doctor(capsys, f"http://127.0.0.1:{port}/")
    assert status == 2
    assert "not JSON" in _one_line(err)


def test_http_url_at_a_port_that_speaks_stomp(capsys: pytest.CaptureFixture[str]) -> None:
    """A STOMP broker answers an HTTP request with an ERROR frame, which is no HTTP status line."""
    for port in _serve_tcp(b"ERROR\nmessage:not a STOMP frame\n\n\x00"):
        status, err = _doctor(capsys, f"http://127.0.0.1:{port}/")
    assert status == 2
    line = _one_line(err)
    assert "does not speak HTTP" in line and "stomp://" in line, line


def test_bad_url(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _doctor(capsys, "amqp://127.0.0.1:5672")
    assert status == 2 and "expected stomp://" in _one_line(err)


def test_broker_that_stops_mid_sampling(capsys: pytest.CaptureFixture[str]) -> None:
    from minibroker.config import BrokerConfig

    broker = RunningBroker(BrokerConfig()).start()
    timer = threading.Timer(1.5, broker.stop)
    timer.start()
    try:
        status, err = _doctor(capsys, f"stomp://127.0.0.1:{broker.port}", "--window", "5")
    finally:
        timer.join()
    assert status == 2
    line = _one_line(err)
    assert "while sampling" in line or "stopped answering" in line, line


def test_jolokia_is_read_as_activemq(capsys: pytest.CaptureFixture[str]) -> None:
    """An ActiveMQ web console answers Jolokia at /api/jolokia (RabbitMQ's /api/overview is a 404 there)."""
    from clients.doctor.live import read_http

    answers = {
        "/api/jolokia/version": {"value": {"agent": "1.7.1", "info": {"product": "activemq", "version": "5.17.2"}}},
        "/api/jolokia/read/org.apache.activemq:type=Broker,brokerName=*/" + read_http._BROKER_ATTRIBUTES: {
            "value": {"org.apache.activemq:brokerName=b,type=Broker": {"BrokerName": "b", "MemoryPercentUsage": 3}}
        },
        "/api/jolokia/read/org.apache.activemq:type=Broker,brokerName=*,destinationType=*,destinationName=*/"
        + read_http._DEST_ATTRIBUTES: {
            "value": {
                "org.apache.activemq:brokerName=b,destinationName=jobs,destinationType=Queue,type=Broker": {
                    "Name": "jobs",
                    "QueueSize": 4,
                    "EnqueueCount": 9,
                    "DequeueCount": 5,
                    "ConsumerCount": 1,
                }
            }
        },
    }

    server = _start_http(_json_answers(answers))
    try:
        status = main(["doctor", "--live", f"http://127.0.0.1:{server.server_address[1]}/", "--window", "1", "--json"])
    finally:
        _stop_http(server)
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert (out["broker"], out["version"], out["findings"]) == ("activemq", "5.17.2", [])


def test_watch_reports_again_and_again_until_the_broker_stops(capsys: pytest.CaptureFixture[str]) -> None:
    from minibroker.config import BrokerConfig

    broker = RunningBroker(BrokerConfig()).start()
    timer = threading.Timer(3.5, broker.stop)
    timer.start()
    try:
        status = main(["doctor", "--live", f"stomp://127.0.0.1:{broker.port}", "--watch", "1", "--timeout", "1"])
    finally:
        timer.join()
    captured = capsys.readouterr()
    assert status == 2
    assert captured.out.count("No problems found.") >= 2, captured.out
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err


# ---------------------------------------------------------------- the same mistakes against real servers


def test_the_real_server_refuses_the_login(capsys: pytest.CaptureFixture[str]) -> None:
    from minibroker.config import BrokerConfig, User
    from minibroker.connection.security import hash_password

    config = BrokerConfig(users=(User("ops", hash_password("right", iterations=1000)),))
    broker = RunningBroker(config).start()
    try:
        status, err = _doctor(capsys, f"stomp://ops:wrong@127.0.0.1:{broker.port}")
        ok, _ = _doctor(capsys, f"stomp://ops:right@127.0.0.1:{broker.port}", "--window", "1")
    finally:
        broker.stop()
    assert status == 2
    line = _one_line(err)
    assert "refused the login" in line and "ops" in line, line
    assert ok == 0  # the right password reads it


def test_the_real_servers_console_is_no_management_api(capsys: pytest.CaptureFixture[str]) -> None:
    """An operator points the doctor at minibroker's web console (an HTTP server, not RabbitMQ's
    API nor Jolokia): both answer 404."""
    from minibroker.config import ANY_PORT, BrokerConfig

    broker = RunningBroker(BrokerConfig().replace(console={"port": ANY_PORT})).start()
    try:
        port = broker.call(lambda: broker.server.console_port)
        status, err = _doctor(capsys, f"http://127.0.0.1:{port}/")
    finally:
        broker.stop()
    assert status == 2
    assert "(HTTP 404): not RabbitMQ's management API nor Jolokia" in _one_line(err)


def test_nothing_listening(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port the kernel just gave and nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url in (f"stomp://127.0.0.1:{port}", f"http://127.0.0.1:{port}/"):
        status, err = _doctor(capsys, url)
        assert status == 2
        assert "refused" in _one_line(err).lower(), err


def test_management_api_that_stops_mid_sampling(capsys: pytest.CaptureFixture[str]) -> None:
    """An HTTP broker that answers, then is gone: one line saying it stopped while sampling."""
    answers = {
        "/api/overview": {"rabbitmq_version": "3.10.8"},
        "/api/nodes": [{"name": "rabbit@here", "mem_used": 1, "mem_limit": 100}],
        "/api/queues": [],
        "/api/connections": [],
        "/api/channels": [],
        "/api/consumers": [],
    }
    server = _start_http(_json_answers(answers))
    timer = threading.Timer(1.5, _stop_http, (server,))
    timer.start()
    try:
        status, err = _doctor(capsys, f"http://127.0.0.1:{server.server_address[1]}/", "--window", "5")
    finally:
        timer.join()
    assert status == 2
    assert "stopped answering while sampling" in _one_line(err), err


@pytest.mark.slow
@pytest.mark.xdist_group("doctor-live-brokers")  # one JVM or Erlang broker at a time
def test_real_activemq_without_the_statistics_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Debian's ActiveMQ started with an activemq.xml that has no statistics plugin: the
    requests go unanswered, and the one line says what to add."""
    from clients.activemq import ActiveMQ, free_port, installed_problem
    from clients.doctor.write_xml import write_xml
    from clients.labs.against import HEAP
    from minibroker.config import BrokerConfig

    problem = installed_problem()
    if problem:
        pytest.fail(problem)
    port = free_port()
    xml = write_xml(BrokerConfig(), stomp_port=port, openwire_port=free_port()).text
    plugin = "<plugins>\n      <statisticsBrokerPlugin/>\n    </plugins>\n"
    assert plugin in xml
    conf = tmp_path / "activemq.xml"
    conf.write_text(xml.replace(plugin, ""))
    broker = ActiveMQ(tmp_path, conf=conf, heap=HEAP, port=port, quick_stop=True)
    broker.start()
    try:
        status, err = _doctor(capsys, f"stomp://127.0.0.1:{port}", "--timeout", "3")
    finally:
        broker.stop()
    assert status == 2
    line = _one_line(err)
    assert line.startswith(f"minibroker doctor: ActiveMQ at stomp://127.0.0.1:{port} did not answer"), line
    assert "statistics plugin is not configured" in line and "<plugins><statisticsBrokerPlugin/></plugins>" in line
