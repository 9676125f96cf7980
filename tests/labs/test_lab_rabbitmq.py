"""``minibroker lab run N --against rabbitmq``: the labs' live runs on RabbitMQ 3.10 too.

The runs start real RabbitMQ nodes of our own (``make test`` installs Debian's package as
root; without it the slow tests skip and say so). Every node a test starts has the test's
own temporary directory in its command line; the fixture checks that none is left running,
and ends any that is (a failed run must not leave one).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
from pathlib import Path

import pytest

from clients import rabbitmq
from clients.cli import main as cli
from clients.labs import find_labs
from clients.labs.against import run_against_rabbitmq
from clients.rabbitmq import processes_under

LABS = find_labs()
AGAINST = [lab for lab in LABS if hasattr(lab.scenario(), "run_rabbitmq")]
NOT_INSTALLED = rabbitmq.installed_problem()
#: The suite plays lab 02's and lab 05's pathologies only (each run starts a node of its own).
SUITE_RUNS = {"02": ("block",), "05": ("shared-connection",)}


@pytest.fixture
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The runs' directories (and so their nodes' command lines) under this test's tmp_path;
    afterwards no node of this test may be running (any left is killed, and the test fails)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    left = processes_under(str(tmp_path))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"RabbitMQ processes left running: {left}"


@pytest.mark.slow
@pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"RabbitMQ is needed: {NOT_INSTALLED}")
@pytest.mark.parametrize("lab", AGAINST, ids=lambda lab: lab.directory.name)
def test_each_live_run_gives_rabbitmqs_verdict_beside_ours(lab, own_tempdir: Path) -> None:
    if lab.number in SUITE_RUNS:
        lab = dataclasses.replace(lab, runs=tuple(r for r in lab.runs if r.name in SUITE_RUNS[lab.number]))
    lines: list[str] = []
    comparisons = run_against_rabbitmq(lab, out=lines.append)
    output = "\n".join(lines)
    assert [c.spec.name for c in comparisons] == [r.name for r in lab.runs]
    for c in comparisons:
        if c.spec.rabbitmq_not_run:
            assert c.ours is None and c.theirs is None
            assert "not run against RabbitMQ" in output and c.spec.rabbitmq_not_run in output
            continue
        assert c.ours is not None and c.theirs is not None
        assert c.ours.as_promised or c.ours.too_busy, output
        assert c.theirs.verdict == c.spec.rabbitmq_expect or c.theirs.unfair, output
    assert "Side by side:" in output and "RabbitMQ 3." in output
    if lab.number == "03":
        # RabbitMQ does not know activemq.exclusive: the appendix's pathology is not there.
        exclusive = next(c for c in comparisons if c.spec.name == "exclusive")
        assert exclusive.ours is not None and exclusive.ours.outcome.pathology
        assert exclusive.theirs is not None and not exclusive.theirs.pathology
        assert "x-single-active-consumer" in output
    if lab.number == "02":
        # Each subscriber's own queue: the slow one does not hold the producer back.
        block = next(c for c in comparisons if c.spec.name == "block")
        assert block.ours is not None and block.ours.outcome.pathology
        assert "vm_memory_high_watermark" in output
    if lab.number == "05":
        # The memory alarm, moved within the workload's reach, blocks the connection that
        # publishes and consumes: its ACKs are never read; a connection that only consumes goes on.
        shared = next(c for c in comparisons if c.spec.name == "shared-connection")
        assert shared.theirs is not None and shared.theirs.pathology
        assert "vm_memory_high_watermark" in output and "memory resource limit alarm set" in output
        assert "blocked" in "\n".join(shared.theirs.evidence)
    assert not processes_under(str(own_tempdir))  # stopped by the run itself, not by the fixture


def test_without_rabbitmq_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(rabbitmq, "RABBITMQ_SERVER", tmp_path / "no-such" / "rabbitmq-server")
    assert cli(["lab", "run", "03", "--against", "rabbitmq"]) != 0
    err = capsys.readouterr().err
    assert "RabbitMQ is not installed" in err and "apt-get install -y rabbitmq-server" in err


def test_a_lab_without_a_run_against_rabbitmq_says_why(capsys) -> None:
    for lab in LABS:
        assert hasattr(lab.scenario(), "run_rabbitmq") != bool(lab.no_rabbitmq), lab.directory.name
        if lab in AGAINST:
            continue
        assert cli(["lab", "run", lab.number, "--against", "rabbitmq"]) != 0
        err = capsys.readouterr().err
        assert f"has no run against RabbitMQ: {lab.no_rabbitmq}" in err, err
    assert cli(["lab", "list"]) == 0
    out = capsys.readouterr().out
    assert out.count("against RabbitMQ: yes (--against rabbitmq)") == len(AGAINST)
    assert out.count("against RabbitMQ: no: ") == len(LABS) - len(AGAINST)
