"""Every lab keeps its promises: ``minibroker lab list`` and ``lab run`` for each."""
from __future__ import annotations

import pytest

from clients.cli import main as cli
from clients.labs import find_labs, run_lab

LABS = find_labs()


def test_every_seed_has_a_lab() -> None:
    seeds = {lab.seed[:3] for lab in LABS}
    assert {"000", "004"} <= seeds
    assert len({lab.number for lab in LABS}) == len(LABS)


def test_lab_list_names_them_all(capsys) -> None:
    assert cli(["lab", "list"]) == 0
    out = capsys.readouterr().out
    for lab in LABS:
        assert lab.directory.name in out


@pytest.mark.parametrize("lab", LABS, ids=[lab.directory.name for lab in LABS])
def test_lab_verdicts_are_as_promised(lab) -> None:
    lines: list[str] = []
    results = run_lab(lab, out=lines.append)
    assert results and all(r.as_promised for r in results), "\n".join(lines)
    assert {r.outcome.verdict for r in results} == {"pathology", "healthy"}  # both sides shown
    assert lines[-1].startswith(f"Result: {len(results)}/{len(results)}")


def test_an_unknown_lab_is_a_clear_error(capsys) -> None:
    assert cli(["lab", "run", "no-such-lab"]) == 2
    assert "no lab 'no-such-lab'; the labs are:" in capsys.readouterr().err
