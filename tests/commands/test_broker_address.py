"""One way to name the broker for every client command: ``--url``, ``$MINIBROKER_URL``,
the port of ``--config FILE``, in that order (``--host``/``--port`` as before)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from clients.cli import CommandError
from clients.cli import main as cli
from clients.commands._common import URL_ENV, BrokerAddress, add_connection_args, broker_address
from minibroker.config import ANY_PORT


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_connection_args(parser)
    return parser.parse_args(argv)


@pytest.fixture(autouse=True)
def _no_url_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)


def test_the_first_found_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("[transport]\nport = 61700\nhost = '0.0.0.0'\n")
    assert broker_address(_args()) == BrokerAddress("127.0.0.1", 61613)
    assert broker_address(_args("--config", str(config))) == BrokerAddress("127.0.0.1", 61700)
    monkeypatch.setenv(URL_ENV, "stomp://localhost:61701")
    assert broker_address(_args("--config", str(config))) == BrokerAddress("localhost", 61701)
    assert broker_address(_args("--url", "ws://[::1]:61702/stomp")) == BrokerAddress("::1", 61702, "ws", "/stomp")
    assert broker_address(_args("--port", "61703")) == BrokerAddress("127.0.0.1", 61703)  # as before
    assert broker_address(_args("--url", "stomp://h")) == BrokerAddress("h", 61613)
    assert broker_address(_args("--url", "ws://h")) == BrokerAddress("h", 61614, "ws", "/")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--url", "http://h:1"], "bad --url 'http://h:1': expected stomp://HOST:PORT or ws://HOST:PORT[/PATH]"),
        (["--url", "stomp://h:99999"], "bad --url 'stomp://h:99999': Port out of range"),
        (["--url", "stomp://h:1/x"], "a stomp:// URL has no path"),
        (["--url", "stomp://h:1", "--port", "2"], "give the broker as --url or as --host/--port, not both"),
        (["--port", "x"], "bad --port 'x'"),
    ],
)
def test_a_bad_address_is_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError) as err:
        broker_address(_args(*argv))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_environment_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_ENV, "61613")
    with pytest.raises(CommandError, match=rf"bad \${URL_ENV} '61613'"):
        broker_address(_args())


def test_send_recv_stat_and_purge_find_the_broker_through_the_environment(
    broker, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, f"stomp://127.0.0.1:{broker.port}")
    assert cli(["send", "/queue/env", "one", "--count", "2", "--receipt"]) == 0
    assert cli(["recv", "/queue/env", "--count", "1", "--timeout", "5"]) == 0
    assert capsys.readouterr().out.endswith("one\n")
    assert cli(["stat", "--json"]) == 0
    [queue] = json.loads(capsys.readouterr().out)["destinations"]
    assert (queue["destinationName"], queue["size"]) == ("/queue/env", 1)
    assert cli(["purge", "/queue/env"]) == 0
    assert broker.call(lambda: broker.server.broker.destinations["/queue/env"].size()) == 0


def test_a_config_file_names_the_port(broker, capsys, tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f"[transport]\nport = {broker.port}\n")
    assert cli(["send", "/queue/conf", "x", "--config", str(config)]) == 0
    assert broker.call(lambda: broker.server.broker.destinations["/queue/conf"].size()) == 1


def test_a_ws_url_speaks_stomp_over_websocket(broker_factory, capsys) -> None:
    broker = broker_factory(transport={"websocket_port": ANY_PORT})
    url = ["--url", f"ws://127.0.0.1:{broker.server.websocket_port}/"]
    assert cli(["send", "/queue/ws", "over websocket", "--receipt", *url]) == 0
    assert cli(["recv", "/queue/ws", "--count", "1", "--timeout", "5", *url]) == 0
    assert capsys.readouterr().out == "sent 1 message to /queue/ws (receipts: 1)\nover websocket\n"
    assert cli(["stat", "--connections", "--json", *url]) == 0
    assert json.loads(capsys.readouterr().out)["connections"] == []  # the asking one (over WebSocket) not listed
