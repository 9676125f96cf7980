"""``minibroker send`` and ``minibroker recv`` end to end against the fake server.

``clients.cli.main`` runs its own event loop (``asyncio.run``), so each call
runs in a worker thread while the fake server keeps serving on the test's loop.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import json
import socket
from pathlib import Path

import pytest

import clients.cli
from clients.commands import COMMANDS

from .fake_server import FakeStompServer


@pytest.fixture(autouse=True)
def only_present_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the subcommands whose modules exist on this branch (``serve``
    is written elsewhere)."""
    present = [n for n in COMMANDS if importlib.util.find_spec(f"clients.commands.{n}")]
    monkeypatch.setattr(clients.cli, "COMMANDS", present)


async def cli(*argv: str) -> int:
    return await asyncio.to_thread(clients.cli.main, list(argv))


def at(server: FakeStompServer) -> list[str]:
    return ["--host", server.host, "--port", str(server.port)]


class Stdin(io.TextIOWrapper):
    """A stand-in for sys.stdin with a chosen isatty()."""

    def __init__(self, data: bytes, tty: bool) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


# ---------------------------------------------------------------- send
async def test_send_count_with_receipts(server, capsys) -> None:
    status = await cli(
        "send",
        "/queue/a",
        "hello",
        "--count",
        "3",
        "--receipt",
        "-H",
        "k:v:w",
        "--persistent",
        "--priority",
        "7",
        *at(server),
    )
    out, err = capsys.readouterr()
    assert (status, out, err) == (0, "sent 3 messages to /queue/a (receipts: 3)\n", "")
    conn = await server.connection()
    sends = [f for f in conn.frames if f.command == "SEND"]
    assert len(sends) == 3 and all(f.body == b"hello" for f in sends)
    assert all("receipt" in f.headers for f in sends)
    assert sends[0].headers["k"] == "v:w"
    assert sends[0].headers["persistent"] == "true" and sends[0].headers["priority"] == "7"
    assert conn.commands()[-1] == "DISCONNECT"


async def test_send_one_without_receipt_still_disconnects_with_one(server, capsys) -> None:
    assert await cli("send", "/topic/t", "x", "--version", "1.1", *at(server)) == 0
    assert capsys.readouterr().out == "sent 1 message to /topic/t\n"
    conn = await server.connection()
    assert conn.version == "1.1"
    assert "receipt" not in conn.frames[1].headers
    assert conn.commands()[-1] == "DISCONNECT" and "receipt" in conn.frames[-1].headers


async def test_send_body_from_file(server, tmp_path, capsys) -> None:
    path = tmp_path / "body.bin"
    path.write_bytes(b"a\x00b")
    assert await cli("send", "/queue/a", "--file", str(path), *at(server)) == 0
    conn = await server.connection()
    assert conn.frames[1].body == b"a\x00b"


@pytest.mark.parametrize(
    "argv, tty, expected",
    [
        (["-"], True, b"from stdin"),
        ([], False, b"from stdin"),
        ([], True, b""),  # a terminal is not read: empty body
    ],
)
async def test_send_body_from_stdin(server, monkeypatch, capsys, argv, tty, expected) -> None:
    monkeypatch.setattr("sys.stdin", Stdin(b"from stdin", tty))
    assert await cli("send", "/queue/a", *argv, *at(server)) == 0
    conn = await server.connection()
    assert conn.frames[1].body == expected


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--header", "nocolon"], "bad --header 'nocolon': expected NAME:VALUE"),
        (["--header", ":v"], "bad --header ':v': expected NAME:VALUE"),
        (["--count", "0"], "bad --count '0': expected an integer >= 1"),
        (["--count", "x"], "bad --count 'x': expected an integer >= 1"),
        (["--priority", "12"], "bad --priority '12': expected an integer from 0 to 9"),
        (["--port", "0"], "bad --port '0': expected an integer from 1 to 65535"),
        (["--heartbeat", "5"], "bad --heartbeat '5': expected CX,CY in milliseconds"),
        (["--connect-timeout", "-1"], "bad --connect-timeout '-1': expected a positive number of seconds"),
    ],
)
async def test_send_bad_arguments(capsys, argv, message) -> None:
    assert await cli("send", "/queue/a", "body", *argv) == 2
    assert capsys.readouterr().err == f"minibroker send: {message}\n"


async def test_send_unreadable_file(capsys) -> None:
    assert await cli("send", "/queue/a", "--file", "/no/such/file") == 2
    err = capsys.readouterr().err
    assert err == "minibroker send: cannot read --file '/no/such/file': No such file or directory\n"


async def test_send_body_and_file_together_are_refused(capsys) -> None:
    assert await cli("send", "/queue/a", "body", "--file", "f") == 2
    assert capsys.readouterr().err == "minibroker send: give the body as BODY or with --file, not both\n"


async def test_send_cannot_connect(capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert await cli("send", "/queue/a", "x", "--port", str(port)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"minibroker send: cannot connect to 127.0.0.1:{port}: connection refused\n"


async def test_send_refused_at_connect(make_server, capsys) -> None:
    server = await make_server(refuse="User name [bob] or password is invalid.")
    assert await cli("send", "/queue/a", "x", "--login", "bob", *at(server)) == 1
    err = capsys.readouterr().err
    assert err == "minibroker send: broker refused: User name [bob] or password is invalid.\n"


async def test_send_refused_mid_way(make_server, capsys) -> None:
    server = await make_server(error_on_send={"/queue/full": "Usage Manager Memory Limit reached"})
    assert await cli("send", "/queue/full", "x", "--count", "5", "--receipt", *at(server)) == 1
    err = capsys.readouterr().err
    assert err == ("minibroker send: broker refused: Usage Manager Memory Limit reached (0 of 5 accepted)\n")


async def test_send_refused_without_receipts_says_how_many_were_accepted(make_server, capsys) -> None:
    """A single message refused was not accepted, though it was written."""
    server = await make_server(error_on_send={"/queue/x": "unknown destination 'queue/x'"})
    assert await cli("send", "/queue/x", "x", *at(server)) == 1
    err = capsys.readouterr().err
    assert err == "minibroker send: broker refused: unknown destination 'queue/x' (0 of 1 accepted)\n"


# ---------------------------------------------------------------- recv
async def test_recv_count_with_client_individual_acks(server, capsys) -> None:
    server.preload("/queue/a", [b"one", b"two", b"three"])
    status = await cli("recv", "/queue/a", "--count", "2", "--ack", "client-individual", "--prefetch", "1", *at(server))
    out, err = capsys.readouterr()
    assert status == 0
    assert out == "one\ntwo\n"
    assert err == "received 2 messages from /queue/a (acked: 2)\n"
    conn = await server.connection()
    subscribe = conn.frames[1]
    assert subscribe.headers["ack"] == "client-individual"
    assert subscribe.headers["activemq.prefetchSize"] == "1"
    acks = [f for f in conn.frames if f.command == "ACK"]
    assert [a.headers["id"] for a in acks] == ["a-1", "a-2"]


async def test_recv_count_takes_exactly_n_by_default(server, capsys) -> None:
    """With --count and no --ack, recv subscribes in client ack mode with a
    prefetch of N and acknowledges the N with one cumulative ACK just before
    its DISCONNECT: auto would lose what the broker sent beyond N, and an ACK
    per message would reopen the window to messages recv never shows."""
    server.preload("/queue/a", [b"one", b"two", b"three"])
    assert await cli("recv", "/queue/a", "--count", "2", *at(server)) == 0
    out, err = capsys.readouterr()
    assert out == "one\ntwo\n" and err == "received 2 messages from /queue/a (acked: 2)\n"
    conn = await server.connection()
    subscribe = conn.frames[1]
    assert (subscribe.headers["ack"], subscribe.headers["activemq.prefetchSize"]) == ("client", "2")
    assert [(f.command, f.headers.get("id")) for f in conn.frames[2:]] == [("ACK", "a-2"), ("DISCONNECT", None)]


@pytest.mark.parametrize(
    "argv, ack, prefetch",
    [
        (["--count", "2", "--ack", "auto"], "auto", None),  # asked for: as asked
        (["--count", "2", "--prefetch", "5"], "client", "5"),
        (["--timeout", "0.2"], "auto", None),  # no count: nothing beyond it to lose
    ],
)
async def test_recv_ack_mode_defaults(server, capsys, argv, ack, prefetch) -> None:
    server.preload("/queue/a", [b"one", b"two"])
    await cli("recv", "/queue/a", *argv, *at(server))
    conn = await server.connection()
    subscribe = conn.frames[1]
    assert (subscribe.headers.get("ack", "auto"), subscribe.headers.get("activemq.prefetchSize")) == (ack, prefetch)


async def test_recv_stops_when_idle(server, capsys) -> None:
    server.preload("/queue/a", [b"only"])
    assert await cli("recv", "/queue/a", "--timeout", "0.2", *at(server)) == 0
    out, err = capsys.readouterr()
    assert out == "only\n"
    assert err == "received 1 message from /queue/a; nothing arrived for 0.2s\n"


async def test_recv_short_of_count_fails(server, capsys) -> None:
    server.preload("/queue/a", [b"only"])
    assert await cli("recv", "/queue/a", "--count", "3", "--timeout", "0.2", "--ack", "client", *at(server)) == 1
    err = capsys.readouterr().err
    assert err == "received 1 of 3 messages from /queue/a (acked: 1); nothing arrived for 0.2s\n"


async def test_recv_show_json_and_headers(server, capsys) -> None:
    server.preload("/queue/a", [b"text", b"\xff\xfe"], {"app": "1"})
    assert await cli("recv", "/queue/a", "--count", "2", "--show", "json", *at(server)) == 0
    lines = capsys.readouterr().out.splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first["body"] == "text" and first["headers"]["app"] == "1"
    assert first["destination"] == "/queue/a" and first["redelivered"] is False
    assert second["body_base64"] == "//4="
    server.preload("/queue/b", [b"body"], {"app": "2"})
    assert await cli("recv", "/queue/b", "--count", "1", "--show", "headers", *at(server)) == 0
    out = capsys.readouterr().out
    assert "app:2\n" in out and "destination:/queue/b\n" in out and out.endswith("\n\nbody\n\n")


async def test_recv_subscribe_options(server, capsys) -> None:
    server.preload("/queue/a", [b"x"])
    assert (
        await cli(
            "recv", "/queue/a", "-n", "1", "--selector", "app = '1'", "-H", "activemq.exclusive:true", *at(server)
        )
        == 0
    )
    conn = await server.connection()
    headers = conn.frames[1].headers
    assert headers["selector"] == "app = '1'" and headers["activemq.exclusive"] == "true"


async def test_recv_broker_drops_the_connection(server, capsys) -> None:
    async def hang_up() -> None:
        conn = await server.connection()
        await conn.wait_frame("SUBSCRIBE")
        conn.error("Broker is shutting down")

    dropper = asyncio.ensure_future(hang_up())
    assert await cli("recv", "/queue/a", "--timeout", "5", *at(server)) == 1
    await dropper
    err = capsys.readouterr().err
    assert err == "minibroker recv: broker refused: Broker is shutting down (after 0 received)\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--timeout", "0"], "bad --timeout '0': expected a positive number of seconds"),
        (["--count", "-2"], "bad --count '-2': expected an integer >= 1"),
        (["--prefetch", "many"], "bad --prefetch 'many': expected an integer >= 0"),
        (["-H", "x"], "bad --header 'x': expected NAME:VALUE"),
        (["--no-ack"], "--no-ack needs a client ack mode: --ack client or client-individual (or --count)"),
        (
            ["--no-ack", "--ack", "auto", "--count", "1"],
            "--no-ack needs a client ack mode: --ack client or client-individual (or --count)",
        ),
    ],
)
async def test_recv_bad_arguments(capsys, argv, message) -> None:
    assert await cli("recv", "/queue/a", *argv) == 2
    assert capsys.readouterr().err == f"minibroker recv: {message}\n"


@pytest.mark.parametrize("command", ["send", "recv"])
def test_help(command, capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit) as info:
        clients.cli.main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--host", "--port", "--login", "--passcode", "--client-id", "--version", "--header"):
        assert option in out


def test_every_commands_help_reads_as_text() -> None:
    """A command's help is printed from its module's docstring: the docstring's ``markup`` is not shown."""
    parser = clients.cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"serve", "lab", "stat", "journal", "doctor", "bench"} <= set(commands)
    shown = {name: command.format_help() for name, command in commands.items()}
    assert not [name for name, text in shown.items() if "``" in text]


async def _recv_interrupted_after_first(server, capsys, count: int | None) -> tuple[str, object]:
    """Run recv (``--count`` when given) on a queue holding one message, cancel it
    (as Ctrl-C does) once it printed that message; its summary and connection."""
    from clients.commands import recv

    server.preload("/queue/a", [b"first"])
    counted = [] if count is None else ["--count", str(count)]
    args = clients.cli.build_parser().parse_args(["recv", "/queue/a", *counted, *at(server)])
    task = asyncio.ensure_future(recv._recv(args, count, None, None, {}))
    conn = await server.connection()
    await conn.wait_frame("SUBSCRIBE")
    out = ""
    for _ in range(500):
        out += capsys.readouterr().out
        if out:
            break
        await asyncio.sleep(0.01)
    assert out == "first\n"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return capsys.readouterr().err, conn


async def test_recv_interrupted_prints_its_summary(server, capsys) -> None:
    err, _ = await _recv_interrupted_after_first(server, capsys, None)
    assert err == "received 1 message from /queue/a; interrupted\n"


async def test_recv_count_interrupted_acknowledges_what_it_printed(server, capsys) -> None:
    """recv --count acknowledges at the end; interrupted before, it still
    acknowledges what it printed, so that does not come back."""
    err, conn = await _recv_interrupted_after_first(server, capsys, 3)
    assert err == "received 1 of 3 messages from /queue/a (acked: 1); interrupted\n"
    ack = await conn.wait_frame("ACK")  # type: ignore[attr-defined]
    assert ack.headers["id"] == "a-1"


def test_analyze_says_what_is_wrong_as_every_command_does(tmp_path, capsys) -> None:
    """A file with no trace line: ``minibroker analyze: ...`` on one line, status 2, before any engine."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not a trace line\n")
    assert clients.cli.main(["analyze", str(empty), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"minibroker analyze: no trace events in {empty}\n"


@pytest.mark.parametrize(
    "text, said",
    [
        ('name = "x"\n', "unknown key 'name' in "),
        ("[nosuch]\nx = 1\n", "unknown section 'nosuch' in "),
    ],
)
def test_doctor_tells_a_key_from_a_section(tmp_path, capsys, text, said) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    assert clients.cli.main(["doctor", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_doctor_on_a_lab_file_says_it_is_a_lab_description(capsys) -> None:
    lab = Path(__file__).resolve().parents[2] / "examples" / "labs" / "00-starving-consumers" / "lab.toml"
    assert clients.cli.main(["doctor", str(lab)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minibroker doctor: {lab} is a lab description, not a broker configuration: its runs use ")
    assert "legacy.toml" in err
