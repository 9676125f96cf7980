"""The command-line client against the real broker: what a user of ``minibroker recv`` gets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from clients.cli import main as cli


def test_recv_count_takes_exactly_n_and_loses_nothing(broker, capsys) -> None:
    """``recv --count N`` (the default ack mode) takes N messages and leaves the
    rest: in ``auto`` mode the broker would count every message it pushed into
    the socket beyond N as consumed, and they would be gone."""
    port = ["--port", str(broker.port)]
    for i in range(5):
        assert cli(["send", "/queue/cli.exact", f"m{i}", "--receipt", *port]) == 0
    capsys.readouterr()
    got: list[str] = []
    for n in (1, 2, 2):
        assert cli(["recv", "/queue/cli.exact", "--count", str(n), "--timeout", "5", *port]) == 0
        out, err = capsys.readouterr()
        got += out.splitlines()
        assert err == f"received {n} message{'s' if n > 1 else ''} from /queue/cli.exact (acked: {n})\n"
    assert got == [f"m{i}" for i in range(5)]
    assert cli(["recv", "/queue/cli.exact", "--timeout", "0.3", *port]) == 0  # nothing left
    assert capsys.readouterr() == ("", "received 0 messages from /queue/cli.exact; nothing arrived for 0.3s\n")


def test_recv_count_leaves_the_messages_it_did_not_take_untouched(broker, capsys) -> None:
    """After ``recv --count 10`` of 30, the other 20 wait on the queue as they
    were: none flagged redelivered, none with a redelivery counted (which
    would send it to the DLQ early once a consumer NACKs it)."""
    port = ["--port", str(broker.port)]
    assert cli(["send", "/queue/cli.untouched", "m", "--count", "30", *port]) == 0
    assert cli(["recv", "/queue/cli.untouched", "--count", "10", "--timeout", "5", *port]) == 0
    capsys.readouterr()
    assert cli(["browse", "/queue/cli.untouched", "--count", "100", "--json", *port]) == 0
    left = json.loads(capsys.readouterr().out)["messages"]
    assert [m["redelivered"] for m in left] == [False] * 20


def _run_into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``minibroker ARGV`` with its stdout a pipe whose reader has already gone
    (``minibroker stat | head -1`` once head has its line)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "clients.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        ["stat"],
        ["browse", "/queue/cli.pipe"],
        ["stat", "--json"],
        ["doctor"],
    ],
)
def test_output_closed_early_ends_the_command_quietly(broker, argv) -> None:
    """Any subcommand whose reader stops early ends as ``cat`` does: no
    traceback, nothing on stderr, 128 + SIGPIPE."""
    assert cli(["send", "/queue/cli.pipe", "hello", "--port", str(broker.port)]) == 0
    port = [] if argv == ["doctor"] else ["--port", str(broker.port)]
    done = _run_into_closed_pipe([*argv, *port])
    assert (done.returncode, done.stderr) == (128 + signal.SIGPIPE, "")


def test_recv_into_a_closed_pipe_leaves_the_message_queued(broker, capsys) -> None:
    """recv stops at the first message it cannot print, says so, and does not
    acknowledge it: the message stays on the queue."""
    port = ["--port", str(broker.port)]
    assert cli(["send", "/queue/cli.pipe.recv", "kept", *port]) == 0
    done = _run_into_closed_pipe(["recv", "/queue/cli.pipe.recv", "--count", "1", "--timeout", "5", *port])
    assert "Traceback" not in done.stderr
    assert "output closed" in done.stderr
    capsys.readouterr()
    assert cli(["recv", "/queue/cli.pipe.recv", "--count", "1", "--timeout", "5", *port]) == 0
    assert capsys.readouterr().out == "kept\n"
