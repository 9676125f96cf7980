"""The command-line client against the real broker: what a user of ``minibroker recv`` gets."""
from __future__ import annotations

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
