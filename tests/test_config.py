"""Configuration: the embedded default, validation messages, policies, wildcards."""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from minibroker import wildcards
from minibroker.config import BrokerConfig, load_config, parse_config, parse_size
from minibroker.errors import ConfigError


def test_embedded_default_is_the_declared_default() -> None:
    assert load_config() == BrokerConfig()


def test_the_embedded_default_documents_every_option() -> None:
    import dataclasses

    from minibroker import config as cfg

    text = cfg.default_config_text()
    classes = [
        cfg.BrokerSection,
        cfg.TransportConfig,
        cfg.SystemUsageConfig,
        cfg.StoreConfig,
        cfg.PolicyEntry,
        cfg.User,
        cfg.AuthorizationEntry,
    ]
    missing = [f"{c.__name__}.{f.name}" for c in classes for f in dataclasses.fields(c) if f"{f.name} =" not in text]
    assert missing == []


@pytest.mark.parametrize(
    "text,expected",
    [
        (0, 0),
        (65536, 65536),
        ("64 mb", 64 * 1024**2),
        ("1.5 MiB", 1536 * 1024),
        ("100kb", 102400),
        ("2 GB", 2 * 1024**3),
        ("7", 7),
    ],
)
def test_sizes(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "-1", -5, "5 parsecs", True, 1.5])
def test_bad_sizes(text) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    "doc,message",
    [
        ({"transport": {"prot": 1}}, "unknown key 'transport.prot'"),
        ({"transport": {"port": "abc"}}, "bad value for 'transport.port': 'abc' (expected an integer from 0 to 65535)"),
        ({"transport": {"port": 70000}}, "bad value for 'transport.port': 70000"),
        ({"system_usage": {"memory_limit": "lots"}}, "bad value for 'system_usage.memory_limit': 'lots'"),
        (
            {"store": {"layout": "circular"}},
            "bad value for 'store.layout': 'circular' (expected one of 'growing', 'ring')",
        ),
        ({"store": {"file_count": 2}}, "bad value for 'store.file_count': 2 (expected an integer from 4 to 64)"),
        ({"transport": {"default_heart_beat": "fast"}}, "bad value for 'transport.default_heart_beat'"),
        ({"brokers": {}}, "unknown section 'brokers'"),
        ({"transport": 5}, "'transport' must be a table"),
        ({"destination_policy": [{"queue": ">", "topic": ">"}]}, "needs exactly one of 'queue' or 'topic'"),
        ({"destination_policy": [{"queue": "/queue/a"}]}, "bad value for 'destination_policy[0].queue'"),
        ({"destination_policy": {"queue": ">"}}, "must be an array of tables"),
        ({"destination_policy": [{"queue": ">", "speed": 1}]}, "unknown key 'destination_policy[0].speed'"),
        # Values the storage or the wire could not live with, refused at start instead of failing later:
        (
            {"store": {"journal_max_file_length": 255}},
            "bad value for 'store.journal_max_file_length': 255 (expected a size of at least 256 bytes",
        ),
        ({"store": {"file_size": 0}}, "bad value for 'store.file_size': 0 (expected a size of at least 256 bytes"),
        ({"store": {"temp_journal_max_file_length": "100"}}, "bad value for 'store.temp_journal_max_file_length'"),
        (
            {"transport": {"max_frame_size": 0}},
            "bad value for 'transport.max_frame_size': 0 (expected a size of at least 1024 bytes",
        ),
        (
            {"users": [{"name": "a", "password_hash": "pbkdf2_sha256$1000000000$c2FsdA$aGFzaA"}]},
            "bad value for 'users[0].password_hash': 'pbkdf2_sha256$1000000000$c2FsdA$aGFzaA' "
            "(expected from 1 to 2,000,000 iterations (every login runs them all), not 1,000,000,000)",
        ),
        (
            {"users": [{"name": "a", "password_hash": "pbkdf2_sha256$\u00b2$c2FsdA$aGFzaA"}]},
            "(not a non-negative integer in ASCII digits (0-9))",
        ),
        ({"users": [{"name": "a", "password_hash": "plain"}]}, "(expected pbkdf2_sha256$<iterations>$<salt>$<hash>"),
        ({"transport": {"default_heart_beat": "\u00b2,0"}}, "bad value for 'transport.default_heart_beat': '\u00b2,0'"),
    ],
)
def test_validation_names_the_key_and_value(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert message in str(info.value)


def test_policy_most_specific_wins() -> None:
    config = parse_config(
        {
            "destination_policy": [
                {"queue": ">", "queue_prefetch": 10},
                {"queue": "orders.>", "queue_prefetch": 20},
                {"queue": "orders.eu", "queue_prefetch": 30},
                {"topic": ">", "topic_prefetch": 40},
            ]
        }
    )
    assert config.policy_for("queue", "orders.eu").queue_prefetch == 30
    assert config.policy_for("queue", "orders.us").queue_prefetch == 20
    assert config.policy_for("queue", "payments").queue_prefetch == 10
    assert config.policy_for("topic", "orders.eu").topic_prefetch == 40


@pytest.mark.parametrize(
    "pattern,name,expected",
    [
        (">", "a", True),
        (">", "a.b.c", True),
        ("PRICE.>", "PRICE", True),
        ("PRICE.>", "PRICE.STOCK.NYSE.IBM", True),
        ("PRICE.>", "PRICES.X", False),
        ("PRICE.*.IBM", "PRICE.STOCK.IBM", True),
        ("PRICE.*.IBM", "PRICE.STOCK.NYSE.IBM", False),
        ("PRICE.*", "PRICE", False),
        ("a.b", "a.b", True),
        ("a.b", "a.b.c", False),
        ("*", "a", True),
        ("*", "a.b", False),
    ],
)
def test_wildcards(pattern: str, name: str, expected: bool) -> None:
    assert wildcards.matches(pattern, name) is expected


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[transport\nport = 1")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(bad)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clients.cli", *args], capture_output=True, text=True, timeout=60)


def test_an_unknown_key_names_the_file_and_the_nearest_known_key(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('[system_usage]\nmemory_limt = "64 MB"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"unknown key 'system_usage.memory_limt' in '{path}': did you mean 'memory_limit'?" in str(err.value)
    path.write_text("[trasnport]\nport = 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"unknown section 'trasnport' in '{path}': did you mean 'transport'?" in str(err.value)
    path.write_text("[store]\nzzz = 1\n")
    with pytest.raises(ConfigError) as err:  # nothing near: no guess
        load_config(path)
    assert "did you mean" not in str(err.value) and "(known keys: " in str(err.value)


def test_serve_refuses_a_bad_config_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "broker.toml"
    bad.write_text("[system_usage]\nmemory_limit = 'huge'\n")
    result = run_cli("serve", "--config", str(bad))
    assert result.returncode == 2
    assert "bad value for 'system_usage.memory_limit': 'huge'" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_journal_file_too_small_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "broker.toml"
    bad.write_text("[store]\njournal_max_file_length = 100\n")
    result = run_cli("serve", "--config", str(bad), "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 2
    assert "bad value for 'store.journal_max_file_length': 100 (expected a size of at least 256 bytes" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("option", ["--port", "--websocket-port", "--console-port"])
def test_serve_on_a_port_in_use_refuses_before_it_opens_the_store(tmp_path: Path, option: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        ports = {"--port": "0", "--websocket-port": "0", "--console-port": "0", option: str(port)}
        data = tmp_path / "data"
        result = run_cli("serve", "--host", "127.0.0.1", "--data-dir", str(data), *itertools.chain(*ports.items()))
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "recovered" not in result.stderr and "Traceback" not in result.stderr
    assert not data.exists()  # no data directory, no lock file


def test_serve_refuses_a_bad_port_argument() -> None:
    result = run_cli("serve", "--port", "high")
    assert result.returncode == 2
    assert "port must be an integer from 0 to 65535, not 'high'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["serve", "passwd"])
def test_every_subcommand_has_help(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert "usage: minibroker" in result.stdout
