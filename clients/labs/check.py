"""Grading a student's answer to a lab's exercise (``minibroker lab check``).

- predict / diagnose: a small TOML answer file, ``answer = 50`` or
  ``answer = "stalled_socket"``: **right** or **wrong**;
- config: the exercise's run (its workload, on the virtual clock) with the student's
  configuration, our TOML or an activemq.xml read by ``clients.doctor``; the settings the
  exercise keeps come from the run's own file. **cured** (the run is healthy),
  **mitigated** or **still broken** (the pathology shows);
- client: the scenario's ``run_client(lab, path)`` plays the run against the real server
  with the student's consumer, graded as a config.

A check never writes into the lab's directory: each run has a fresh working directory.
The answer keys, and wrong answers kept with the grade and hint they get, are in
``examples/instructor/NN-name/keys.toml`` (``Key``, ``instructor_keys``)::

    [[answer]]
    exercise = "fix-the-limits"
    file = "fix-the-limits.toml"      # beside keys.toml
    grade = "cured"                   # what lab check says of it
    hint = "memory of its own"        # words the check's hint must contain ("" for a key)
    about = "the article's cure"
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minibroker.config import BrokerConfig
from minibroker.errors import ConfigError

from ..spark.findings import DETECTORS
from .model import Exercise, Lab, LabError, RunSpec, labs_directory
from .runner import RunResult, run_one, telling_lines
from .settings import configure, read_toml, setting_value

__all__ = ["Check", "Key", "PASSING", "check", "instructor_keys", "pick_exercise"]

#: What a run's grade makes of a configuration or a client.
CHECK_GRADES = {"pathology": "still broken", "mitigated": "mitigated", "healthy": "cured"}
#: The grade that passes, by kind of exercise.
PASSING = {"predict": "right", "diagnose": "right", "config": "cured", "client": "cured"}


@dataclass
class Check:
    """What ``lab check`` says of one answer."""

    exercise: Exercise
    grade: str
    evidence: list[str] = field(default_factory=list)
    hint: str = ""

    @property
    def passed(self) -> bool:
        return self.grade == PASSING[self.exercise.kind]

    def lines(self) -> list[str]:
        out = [f"{self.exercise.id} ({self.exercise.kind}): {self.grade.upper()}"]
        out += [f"  - {line}" for line in self.evidence]
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return out


def pick_exercise(lab: Lab, exercise_id: str | None, kind_option: str) -> Exercise:
    """The exercise ``exercise_id`` names, or the lab's only one that ``kind_option`` grades."""
    if exercise_id is not None:
        found = [e for e in lab.exercises if e.id == exercise_id]
        if not found:
            ids = ", ".join(e.id for e in lab.exercises) or "none"
            raise LabError(f"lab {lab.directory.name} has no exercise {exercise_id!r}; its exercises: {ids}")
        if found[0].option != kind_option:
            raise LabError(f"exercise {exercise_id} is a {found[0].kind} exercise: check it with {found[0].option}")
        return found[0]
    fitting = [e for e in lab.exercises if e.option == kind_option]
    if len(fitting) != 1:
        ids = ", ".join(e.id for e in fitting) or "none"
        raise LabError(f"lab {lab.directory.name}: say which exercise with --exercise ID ({kind_option} grades: {ids})")
    return fitting[0]


def check(lab: Lab, exercise: Exercise, path: Path) -> Check:
    """Grade the answer in ``path`` to ``exercise``; LabError (one line) when it cannot be read."""
    if not path.is_file():
        raise LabError(f"no file {path}")
    graders: dict[str, Callable[[Lab, Exercise, Path], Check]] = {
        "predict": _predict,
        "diagnose": _diagnose,
        "config": _config,
        "client": _client,
    }
    return graders[exercise.kind](lab, exercise, path)


def _answer(path: Path) -> Any:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LabError(f"{path} is not a TOML answer file (answer = ...): {exc}") from None
    if "answer" not in data:
        raise LabError(f"{path} has no 'answer = ...' line")
    return data["answer"]


#: The lab's own runs played for a prediction, by (lab directory, run): the virtual clock repeats
#: exactly, so a run is played once per process however many answers are checked against it.
_PLAYED: dict[tuple[Path, str], RunResult] = {}


def _predict(lab: Lab, exercise: Exercise, path: Path) -> Check:
    answer = _answer(path)
    key = (lab.directory, exercise.run)
    if key not in _PLAYED:
        _PLAYED[key] = _play(lab, lab.run_named(exercise.run))
    result = _PLAYED[key]
    if exercise.metric == "grade":
        actual: Any = result.grade
        right = isinstance(answer, str) and answer.strip().lower() == actual
    else:
        actual = result.outcome.metrics.get(exercise.metric)
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            raise LabError(f"{path}: the answer to {exercise.id} is a number, not {answer!r}")
        allowed = exercise.tolerance * abs(actual) / 100 if exercise.relative else exercise.tolerance
        right = abs(answer - actual) <= allowed
    evidence = [f"you predicted {answer}; run {exercise.run} gave {exercise.metric} = {actual}"]
    evidence += telling_lines(result)
    return Check(exercise, "right" if right else "wrong", evidence, "" if right else exercise.hints.get("wrong", ""))


def _words(name: str) -> tuple[str, ...]:
    """A name's words, in order of the alphabet, singular: "Stalled sockets" and
    ``socket_stalled`` are the same name to a student who read the analysis's words."""
    words = re.split(r"[\W_]+", name.strip().lower())
    return tuple(sorted(w.removesuffix("s") for w in words if w))


def _diagnose(lab: Lab, exercise: Exercise, path: Path) -> Check:
    answer = _answer(path)
    if not isinstance(answer, str):
        raise LabError(f"{path}: the answer to {exercise.id} is a detector's name, in quotes, not {answer!r}")
    spec = lab.run_named(exercise.run)
    right = {_words(name): name for name in exercise.causes + exercise.doctor_names}
    if _words(answer) in right:
        named = right[_words(answer)]
        what = "the detector that fires" if named in exercise.causes else "what doctor --live calls what fires"
        return Check(exercise, "right", [f"{named}: {what} on run {spec.name}"])
    evidence = [f"{answer!r} is not what the evidence of run {spec.name} shows"]
    if _words(answer) not in {_words(name) for name in DETECTORS}:
        evidence.append(
            f"{answer!r} is no detector's name; the trace analysis prints each finding as NAME: what it saw, "
            f'and its names are {", ".join(DETECTORS)} (the glossary says what each means, under "Detectors")'
        )
    return Check(exercise, "wrong", evidence, exercise.hints.get("wrong", ""))


def _config(lab: Lab, exercise: Exercise, path: Path) -> Check:
    spec = lab.run_named(exercise.run)
    try:
        student = _student_config(spec, exercise, path)
    except ConfigError as exc:
        raise LabError(str(exc)) from None
    checked = _graded(exercise, _play(lab, dataclasses.replace(spec, given=student)))
    checked.evidence[:0] = _kept_over_yours(spec, exercise, path)
    return checked


def _kept_over_yours(spec: RunSpec, exercise: Exercise, path: Path) -> list[str]:
    """The settings the exercise keeps that the student's TOML sets otherwise: the check plays
    the lab's, and says so (an activemq.xml is not compared)."""
    from ..doctor.reader import looks_like_xml

    if looks_like_xml(path, path.read_bytes()):
        return []
    own, yours = read_toml(spec.config_path), read_toml(path)
    lines = []
    for key in exercise.keep:
        (lab_sets, lab_value), (you_set, your_value) = setting_value(own, key), setting_value(yours, key)
        if you_set and (not lab_sets or _setting_text(your_value) != _setting_text(lab_value)):
            kept = repr(lab_value) if lab_sets else "its default"
            lines.append(f"{key} stays {kept} as the lab has it (yours: {your_value!r}, not used)")
    return lines


def _setting_text(value: Any) -> str:
    return str(value).replace(" ", "").lower()


def _student_config(spec: RunSpec, exercise: Exercise, path: Path) -> BrokerConfig:
    """The student's file read (TOML, or activemq.xml by doctor's reader), the kept settings the run's."""
    from ..doctor.model import DoctorError
    from ..doctor.reader import looks_like_xml, read

    own = read_toml(spec.config_path)
    kept = [(key, value) for key in exercise.keep for is_set, value in [setting_value(own, key)] if is_set]
    if looks_like_xml(path, path.read_bytes()):
        try:
            config = read(path).config
        except DoctorError as exc:
            raise ConfigError(str(exc)) from None
        parsed = configure({}, kept, f"'{spec.config_path}'")  # the kept settings, parsed
        sections: dict[str, dict[str, Any]] = {}
        for key, _ in kept:
            section, option = key.split(".", 1)
            sections.setdefault(section, {})[option] = getattr(getattr(parsed, section), option)
        return config.replace(**sections)
    return configure(read_toml(path), kept, f"'{path}'")


def _client(lab: Lab, exercise: Exercise, path: Path) -> Check:
    if path.suffix != ".py":
        raise LabError(f"{path} is not a Python file (a consumer, FILE.py)")
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise LabError(f"{path} is not Python: {exc}") from None
    scenario = lab.scenario()
    if not hasattr(scenario, "run_client"):
        raise LabError(f"lab {lab.directory.name} has no client exercise")
    spec = lab.run_named(exercise.run)
    return _graded(exercise, run_one(lab, spec, lambda run: scenario.run_client(run, path)))


def _play(lab: Lab, spec: RunSpec) -> RunResult:
    return run_one(lab, spec, lab.scenario().run, virtual=True)


def _graded(exercise: Exercise, result: RunResult) -> Check:
    grade = CHECK_GRADES[result.grade]
    evidence = [f"run {result.spec.name} with yours: {result.grade}: {result.outcome.summary}"]
    evidence += [line.split("; cure:")[0] for line in telling_lines(result)]  # the evidence, not the answer
    return Check(exercise, grade, evidence, "" if grade == "cured" else exercise.hints.get(grade, ""))


@dataclass(frozen=True)
class Key:
    """An answer an instructor keeps: the key, or a wrong answer and what it is told."""

    exercise: str
    path: Path
    grade: str
    hint: str = ""
    about: str = ""


def instructor_keys(lab: Lab) -> list[Key]:
    """``examples/instructor/<lab directory>/keys.toml``, read (empty when there is none)."""
    path = labs_directory().parent / "instructor" / lab.directory.name / "keys.toml"
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return [
        Key(a["exercise"], path.parent / a["file"], a["grade"], a.get("hint", ""), a.get("about", ""))
        for a in data.get("answer", [])
    ]
