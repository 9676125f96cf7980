"""Three grades for every run: pathology, mitigated, healthy, the thresholds in lab.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.labs import LabError, find_labs, load_lab
from clients.labs.model import GRADES, Threshold
from clients.labs.runner import Outcome, RunResult

LABS = {lab.number: lab for lab in find_labs()}


def test_every_lab_declares_what_healthy_means() -> None:
    for lab in LABS.values():
        assert all(spec.healthy for spec in lab.runs), lab.directory.name
        assert {spec.expect for spec in lab.runs} <= set(GRADES)


def test_link_stealing_is_mitigated_not_a_cure() -> None:
    """154 of 1,000 processed and 3,216 redeliveries: the reconnect gets in, the stall stays."""
    spec = next(s for s in LABS["03"].runs if s.name == "link-stealing")
    assert spec.expect == "mitigated"
    numbers = {"processed": 154, "messages": 1000, "partial_writes": 129, "duplicates": 3216}
    result = RunResult(spec, Outcome(False, "the reconnect took the old connection over", metrics=numbers))
    assert result.grade == "mitigated" and result.as_promised
    assert result.missed[0] == "processed 154, healthy needs >= 100% of messages"
    cured = RunResult(spec, Outcome(False, "x", metrics={"processed": 1000, "messages": 1000, "partial_writes": 0}))
    assert cured.grade == "healthy" and not cured.as_promised
    assert RunResult(spec, Outcome(True, "x", metrics=numbers)).grade == "pathology"


@pytest.mark.parametrize(
    ("text", "metrics", "failure"),
    [
        (">= 1000", {"n": 999}, "n 999, healthy needs >= 1000"),
        (">= 1000", {"n": 1000}, ""),
        (">= 95% of sent", {"n": 94, "sent": 100}, "n 94, healthy needs >= 95% of sent"),
        (">= 95% of sent", {"n": 95, "sent": 100}, ""),
        ("<= 0", {"n": 3}, "n 3, healthy needs <= 0"),
        ("== 0", {"other": 3}, ""),  # a number the run does not report: does not apply
        ("<= 1", {"n": None}, ""),
    ],
)
def test_a_threshold_reads_as_it_is_written(text: str, metrics: dict, failure: str) -> None:
    assert Threshold.parse("n", text).failure(metrics) == failure


def _lab_with(tmp_path: Path, extra: str, expect: str = "healthy") -> Path:
    (tmp_path / "c.toml").write_text("")
    (tmp_path / "lab.toml").write_text(
        f'name = "x"\ntitle = "x"\nsource = "stalled-socket"\n{extra}\n'
        f'[[run]]\nname = "r"\nconfig = "c.toml"\nexpect = "{expect}"\n'
    )
    return tmp_path


def test_a_bad_threshold_or_grade_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(LabError, match=r"\[healthy\]: threshold n = 'about 3' is not 'OP NUMBER'"):
        load_lab(_lab_with(tmp_path, '[healthy]\nn = "about 3"'))
    with pytest.raises(LabError, match=r"run\[0\]\.expect must be one of \('pathology', 'mitigated', 'healthy'\)"):
        load_lab(_lab_with(tmp_path, "", expect="cured"))


def test_a_runs_own_threshold_wins_over_the_labs(tmp_path: Path) -> None:
    lab = _lab_with(tmp_path, '[healthy]\nn = ">= 10"\nm = "<= 1"')
    text = (lab / "lab.toml").read_text() + 'healthy = { n = ">= 5" }\n'
    (lab / "lab.toml").write_text(text)
    spec = load_lab(lab).runs[0]
    assert sorted(str(t) for t in spec.healthy) == ["<= 1", ">= 5"]
    assert spec.grade(False, {"n": 6, "m": 0}) == ("healthy", [])
