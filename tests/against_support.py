"""The labs' live runs against another broker (ActiveMQ, RabbitMQ): what every such run must
show, and the temporary directory that leaves none of that broker's processes running."""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from clients.labs import Lab
from clients.labs.against import Comparison

#: The other brokers as the output names them, by their keys in lab.toml.
DISPLAY_NAMES = {"activemq": "ActiveMQ", "rabbitmq": "RabbitMQ"}


def only_suite_runs(lab: Lab, suite_runs: Mapping[str, tuple[str, ...]]) -> Lab:
    """``lab`` with only the runs the suite plays of it (every run when ``suite_runs`` names none)."""
    if lab.number not in suite_runs:
        return lab
    return dataclasses.replace(lab, runs=tuple(r for r in lab.runs if r.name in suite_runs[lab.number]))


def run_checked(lab: Lab, run_against: Callable[..., list[Comparison]]) -> tuple[list[Comparison], str]:
    """Play ``lab`` with ``run_against`` (``run_against_activemq`` ...) and check what every such run shows:

    - one comparison a run, in the lab's order;
    - a run the lab does not play on that broker is not started, and the output says why;
    - our verdict as the lab promises (or the machine too busy), theirs as it expects (or unfair);
    - the two side by side.

    Returns the comparisons and the output, for the checks of each lab's own lesson."""
    lines: list[str] = []
    comparisons = run_against(lab, out=lines.append)
    output = "\n".join(lines)
    assert [c.spec.name for c in comparisons] == [r.name for r in lab.runs]
    for c in comparisons:
        if c.key("not_run"):
            assert c.ours is None and c.theirs is None
            assert f"not run against {DISPLAY_NAMES[c.against]}" in output and c.key("not_run") in output
            continue
        assert c.ours is not None and c.theirs is not None
        assert c.ours.as_promised or c.ours.too_busy, output
        assert c.theirs.verdict == c.key("expect") or c.theirs.unfair, output
    assert "Side by side:" in output
    return comparisons, output


def tempdir_left_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, running: Callable[[str], list[int]], what: str
) -> Iterator[Path]:
    """A fixture's body: the runs' directories (and so the broker processes' command lines)
    under ``tmp_path``; afterwards none of the processes ``running`` finds under it may be
    left (any left is killed, and the test fails, naming ``what`` was left)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    left = running(str(tmp_path))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{what} left running: {left}"
