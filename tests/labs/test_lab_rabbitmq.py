"""``minibroker lab run N --against rabbitmq``: the labs' live runs on RabbitMQ 3.10 too.

The runs start real RabbitMQ nodes of our own (``make test`` installs Debian's package as
root; without it the slow tests skip and say so). Every node a test starts has the test's
own temporary directory in its command line; the fixture checks that none is left running,
and ends any that is (a failed run must not leave one).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from against_support import only_suite_runs, run_checked, tempdir_left_clean
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
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The runs' directories under this test's tmp_path; afterwards no node of this test may be running."""
    yield from tempdir_left_clean(tmp_path, monkeypatch, processes_under, "RabbitMQ processes")


@pytest.mark.slow
@pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"RabbitMQ is needed: {NOT_INSTALLED}")
@pytest.mark.parametrize("lab", AGAINST, ids=lambda lab: lab.directory.name)
def test_each_live_run_gives_rabbitmqs_verdict_beside_ours(lab, own_tempdir: Path) -> None:
    comparisons, output = run_checked(only_suite_runs(lab, SUITE_RUNS), run_against_rabbitmq)
    assert "RabbitMQ 3." in output
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
