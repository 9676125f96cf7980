"""Exercises a class can work with: ``lab exercises`` lists them, ``lab check`` grades each
answer key as passing and each kept wrong answer as its key says, with its hint; bad answers
get one line and a non-zero exit, and the lab's own files are never changed."""

from __future__ import annotations

import hashlib
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from clients.cli import main as cli
from clients.labs import find_labs
from clients.labs.check import PASSING, check, instructor_keys
from clients.labs.model import KINDS
from clients.spark.findings import DETECTORS
from minibroker.protocol.message import Message

LABS = find_labs()
BY_NUMBER = {lab.number: lab for lab in LABS}


def test_every_lab_has_four_exercises_or_more_of_the_kinds(capsys) -> None:
    kinds = set()
    for lab in LABS:
        assert len(lab.exercises) >= 4, lab.directory.name
        assert len({e.kind for e in lab.exercises}) >= 3, lab.directory.name
        kinds |= {e.kind for e in lab.exercises}
        for exercise in lab.exercises:
            text = lab.exercise_text(exercise)
            assert text.startswith(f"## {exercise.id}: "), exercise.id
            assert f"lab check {lab.number}" in text, exercise.id  # it says how to check it
        assert cli(["lab", "exercises", lab.number]) == 0
        out = capsys.readouterr().out
        assert all(e.id in out for e in lab.exercises)
        assert f"handout: examples/labs/{lab.directory.name}/handout.md" in out
    assert kinds == set(KINDS)


def test_an_exercise_prints_its_text_and_how_to_check_it(capsys) -> None:
    assert cli(["lab", "exercises", "03", "fix-the-consumer"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## fix-the-consumer: ")
    assert "minibroker lab check 03 --exercise fix-the-consumer --client FILE" in out


def test_no_answer_sits_beside_the_exercises() -> None:
    """The keys are in examples/instructor/, and no exercise text names its own answer."""
    for lab in LABS:
        text = (lab.directory / "exercises.md").read_text(encoding="utf-8")
        for exercise in lab.exercises:
            for cause in exercise.causes + exercise.doctor_names if exercise.kind == "diagnose" else ():
                assert cause not in text, (lab.number, exercise.id)
        assert not list(lab.directory.glob("keys.toml"))
        assert instructor_keys(lab), f"no answer keys for lab {lab.number}"


def test_the_answer_files_format_shows_no_answer() -> None:
    """The example of an answer file's form is none of the lab's right answers."""
    for lab in LABS:
        shown = set(re.findall(r"`answer = ([^`]+)`", (lab.directory / "exercises.md").read_text(encoding="utf-8")))
        for key in instructor_keys(lab):
            if key.grade == "right":
                right = tomllib.loads(key.path.read_text(encoding="utf-8"))["answer"]
                assert repr(right).replace("'", '"') not in shown, (lab.number, key.exercise)


def test_a_predictions_text_gives_the_numbers_it_needs() -> None:
    """Lab 01's receipted count follows from the rates, the memory limit, the mark and a
    message's size in memory: the text gives each, the size as the broker counts it."""
    lab = BY_NUMBER["01"]
    text = " ".join(lab.exercise_text(next(e for e in lab.exercises if e.id == "predict-receipted")).split())
    for given in ("1000 bytes", "50 a second", "20 messages a second", "256 KB", "70%", "900 KB", "1 MB"):
        assert given in text, given
    stated = re.search(r"counts each message it holds as about (\d+(?:\.\d+)?) KB of memory", text)
    assert stated, "the text says what a message takes in memory"
    headers = {"destination": "/topic/prices", "message-id": "ID:minibroker-1-1:123", "seq": "123", "receipt": "r123"}
    size = Message(1, headers["message-id"], "/topic/prices", headers, b"x" * 1000).size
    assert abs(float(stated[1]) * 1024 - size) <= 0.1 * size, (stated[1], size)


def test_lab_05s_held_count_follows_from_its_text(tmp_path: Path) -> None:
    """The worker holds what fits in the broker's memory: the text gives the memory and what the
    broker counts per request, and the count worked out from those two is graded right."""
    lab = BY_NUMBER["05"]
    exercise = next(e for e in lab.exercises if e.id == "predict-held")
    text = " ".join(lab.exercise_text(exercise).split())
    memory = re.search(r"the broker has (\d+) KB of memory", text)
    per_message = re.search(r"counts each message it holds as about (\d+(?:\.\d+)?) KB", text)
    assert memory and per_message, text
    answer = tmp_path / "held.toml"
    answer.write_text(f"answer = {round(int(memory[1]) / float(per_message[1]))}\n")
    result = check(lab, exercise, answer)
    assert result.grade == "right", result.lines()


def test_lab_03s_in_flight_count_follows_from_its_text(tmp_path: Path) -> None:
    """What the broker sends ahead is what its side and the consumer's receive buffer hold: the
    text gives both and a message's size on the wire, and the count worked out is graded right."""
    lab = BY_NUMBER["03"]
    exercise = next(e for e in lab.exercises if e.id == "predict-in-flight")
    text = " ".join(lab.exercise_text(exercise).split())
    receive = re.search(r"an (\d+) KB receive buffer", text)
    broker = re.search(r"once (\d+) KB wait for its socket", text)
    wire = re.search(r"about (\d+(?:\.\d+)?) KB on the wire", text)
    assert receive and broker and wire, text
    answer = tmp_path / "in-flight.toml"
    answer.write_text(f"answer = {round((int(receive[1]) + int(broker[1])) / float(wire[1]))}\n")
    result = check(lab, exercise, answer)
    assert result.grade == "right", result.lines()


def test_the_glossary_says_why_a_held_producer_is_healthy() -> None:
    """Lab 01's vm-cursor producer waits 392 times and is graded healthy: where a student meets
    it (the glossary, the exercise, the README) the difference between held and stuck is said."""
    glossary = (Path(__file__).resolve().parents[2] / "docs" / "glossary.md").read_text(encoding="utf-8")
    entry = next(p for p in glossary.split("\n- ") if p.startswith("**held** and **stuck**"))
    assert "healthy" in entry and "flow_unblock" in entry and "pathology" in entry
    lab = BY_NUMBER["01"]
    exercise = lab.exercise_text(next(e for e in lab.exercises if e.id == "predict-vm-cursor"))
    assert '"held and stuck"' in " ".join(exercise.split())
    readme = " ".join((lab.directory / "README.md").read_text(encoding="utf-8").split())
    assert "Why `vm-cursor` is graded healthy" in readme and '"held and stuck"' in readme


def _diagnosis(tmp_path: Path, number: str, exercise_id: str, answer: str):
    lab = BY_NUMBER[number]
    path = tmp_path / "cause.toml"
    path.write_text(f"answer = {answer!r}\n".replace("'", '"'))
    return check(lab, next(e for e in lab.exercises if e.id == exercise_id), path)


@pytest.mark.parametrize(
    ("number", "exercise_id", "answer"),
    [
        ("01", "diagnose-hang", "producer blocked, idle consumers"),  # the analysis's words, in its order
        ("01", "diagnose-hang", "Blocked-Producer-Idle-Consumer"),
        ("03", "diagnose-stall", "socket stalled"),
        ("03", "diagnose-stall", "prefetch_full_slow_acks"),  # what doctor --live prints of the same stall
    ],
)
def test_a_diagnosis_may_name_the_finding_as_the_product_prints_it(tmp_path: Path, number, exercise_id, answer) -> None:
    result = _diagnosis(tmp_path, number, exercise_id, answer)
    assert result.grade == "right", result.lines()


def test_a_diagnosis_that_names_no_detector_is_told_the_names(tmp_path: Path) -> None:
    result = _diagnosis(tmp_path, "01", "diagnose-hang", "the producer hangs")
    assert result.grade == "wrong" and result.hint
    told = "\n".join(result.evidence)
    assert "'the producer hangs' is no detector's name" in told
    assert all(name in told for name in DETECTORS)
    named = _diagnosis(tmp_path, "01", "diagnose-hang", "slow_consumer")  # a name, the wrong one
    assert named.grade == "wrong" and "no detector's name" not in "\n".join(named.evidence)


@pytest.mark.parametrize("lab", LABS, ids=[lab.directory.name for lab in LABS])
def test_every_key_is_graded_as_it_says_with_its_hint(lab) -> None:
    keys = instructor_keys(lab)
    exercises = {e.id: e for e in lab.exercises}
    passing = {k.exercise for k in keys if k.grade == PASSING[exercises[k.exercise].kind]}
    assert passing == set(exercises), "every exercise has an answer key that passes"
    for key in keys:
        result = check(lab, exercises[key.exercise], key.path)
        shown = "\n".join(result.lines())
        assert result.grade == key.grade, f"{key.path.name}: {shown}"
        assert result.passed == (key.grade == PASSING[result.exercise.kind])
        if key.hint:
            assert key.hint in result.hint, f"{key.path.name}: {shown}"
        else:
            assert not result.hint


CLIENT_EXERCISES = [(lab, e) for lab in LABS for e in lab.exercises if e.kind == "client"]


def test_every_lab_with_a_client_side_cure_has_a_client_exercise() -> None:
    """Lab 02 (the slow subscriber takes only the newest tick), 03 (prefetch and acks), 05
    (one connection to consume, one to send) and 07 (the service bounds its retries): a
    fix-the-client exercise each, with a starting point. Lab 00's memory is held by the
    broker's cursors, lab 01's by its temp store, 04 and 06's by its journal: no client cures them."""
    assert {lab.number for lab, _ in CLIENT_EXERCISES} >= {"02", "03", "05", "07"}
    for lab, exercise in CLIENT_EXERCISES:
        starter = f"examples/labs/{lab.directory.name}/consumer.py"
        assert (lab.directory / "consumer.py").is_file() and starter in lab.exercise_text(exercise), exercise.id


@pytest.mark.parametrize(("lab", "exercise"), CLIENT_EXERCISES, ids=[lab.number for lab, _ in CLIENT_EXERCISES])
def test_a_client_exercises_starting_point_is_not_cured(lab, exercise, monkeypatch) -> None:
    """The starter beside the exercise shows the pathology; the keys (above) cure it."""
    # Long enough for the student's process to start on a busy machine, shorter than the lab's 15 s.
    monkeypatch.setenv("MINIBROKER_LAB_CLIENT_DEADLINE", "10")
    result = check(lab, exercise, lab.directory / "consumer.py")
    assert result.grade == "still broken" and result.hint, result.lines()
    if lab.number == "03":  # its DISCONNECT waits on the stalled ACKs: said so, not "processed 100 of 100"
        told = "\n".join(result.evidence)
        assert "consume() had not returned when the check stopped it at its 10 s deadline" in told, told


def test_check_exits_0_only_when_cured(capsys) -> None:
    keys = Path(__file__).resolve().parents[2] / "examples" / "instructor" / "00-starving-consumers"
    assert cli(["lab", "check", "00", "--config", str(keys / "fix-the-limits.toml")]) == 0
    assert "fix-the-limits (config): CURED" in capsys.readouterr().out
    assert cli(["lab", "check", "00", "--config", str(keys / "wrong-more-memory.toml")]) == 1
    out = capsys.readouterr().out
    assert "STILL BROKEN" in out and "  hint: " in out
    assert "cure:" not in out  # the evidence, not the answer


def test_a_kept_setting_the_student_changed_is_said_to_be_kept() -> None:
    """Lab 00 keeps its 4 MB of broker memory: a file asking for 64 MB is told it was not used,
    rather than left to wonder why the evidence shows the broker's memory full."""
    lab = BY_NUMBER["00"]
    exercise = next(e for e in lab.exercises if e.id == "fix-the-limits")
    keys = Path(__file__).resolve().parents[2] / "examples" / "instructor" / "00-starving-consumers"
    told = check(lab, exercise, keys / "wrong-more-memory.toml").evidence
    assert told[0] == "system_usage.memory_limit stays '4 mb' as the lab has it (yours: '64 mb', not used)", told
    assert not [line for line in check(lab, exercise, keys / "fix-the-limits.toml").evidence if "stays" in line]


# ------------------------------------------------------------------ bad input


def _lab_files() -> dict[Path, str]:
    return {
        p: hashlib.sha256(p.read_bytes()).hexdigest()
        for lab in LABS
        for p in sorted(lab.directory.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture
def untouched_labs():
    before = _lab_files()
    yield
    assert _lab_files() == before


def _refused(capsys, args: list[str], message: str) -> None:
    assert cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


def test_bad_answers_get_one_line(tmp_path: Path, capsys, untouched_labs) -> None:
    not_toml = tmp_path / "broker.toml"
    not_toml.write_text("[system_usage\nmemory_limit = ")
    _refused(capsys, ["lab", "check", "00", "--config", str(not_toml)], "is not valid TOML")
    not_xml = tmp_path / "activemq.xml"
    not_xml.write_text("<beans><broker>")
    _refused(capsys, ["lab", "check", "00", "--config", str(not_xml)], "activemq.xml")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[system_usage]\nmemory = "2 mb"\n')
    _refused(capsys, ["lab", "check", "00", "--config", str(unknown)], "unknown key 'system_usage.memory'")
    not_python = tmp_path / "consumer.py"
    not_python.write_text("def consume(:\n")
    _refused(capsys, ["lab", "check", "03", "--client", str(not_python)], "is not Python")
    _refused(capsys, ["lab", "check", "03", "--client", str(not_toml)], "is not a Python file")
    answer = tmp_path / "answer.toml"
    answer.write_text("50 messages\n")
    _refused(capsys, ["lab", "check", "00", "--exercise", "predict-received", "--answer", str(answer)], "TOML")
    _refused(capsys, ["lab", "check", "00", "--answer", str(answer)], "say which exercise with --exercise ID")
    _refused(capsys, ["lab", "check", "00", "--exercise", "nope", "--answer", str(answer)], "no exercise 'nope'")


def test_a_client_that_raises_hangs_or_never_connects(tmp_path: Path, capsys, monkeypatch, untouched_labs) -> None:
    monkeypatch.setenv("MINIBROKER_LAB_CLIENT_DEADLINE", "3")
    raises = tmp_path / "raises.py"
    raises.write_text("def consume(host, port, queue, count, work):\n    raise RuntimeError('boom')\n")
    _refused(
        capsys, ["lab", "check", "03", "--client", str(raises)], "never connected to the broker"
    )  # it raised before connecting
    connects_then_raises = tmp_path / "connects.py"
    connects_then_raises.write_text(
        "import socket\n"
        "def consume(host, port, queue, count, work):\n"
        "    s = socket.create_connection((host, port))\n"
        "    s.sendall(b'CONNECT\\naccept-version:1.2\\nhost:x\\n\\n\\x00')\n"
        "    s.recv(100)\n"
        "    raise RuntimeError('boom')\n"
    )
    _refused(
        capsys,
        ["lab", "check", "03", "--client", str(connects_then_raises)],
        "your client raised RuntimeError: boom (line 6",
    )
    hangs = tmp_path / "hangs.py"
    hangs.write_text("import time\ndef consume(host, port, queue, count, work):\n    time.sleep(60)\n")
    _refused(capsys, ["lab", "check", "03", "--client", str(hangs)], "never connected to the broker")
    nothing = tmp_path / "nothing.py"
    nothing.write_text("x = 1\n")
    _refused(capsys, ["lab", "check", "03", "--client", str(nothing)], "defines no consume(")


def test_a_handouts_plan_has_the_predictions_made_before_any_run() -> None:
    """``lab run NN`` prints every run's grade and numbers: a plan that has the class run the lab
    before the prediction exercises hands them the answers."""
    for lab in LABS:
        plan = (lab.directory / "handout.md").read_text(encoding="utf-8").split("## Two hours", 1)[1]
        rows = [row for row in plan.splitlines() if re.match(r"\| \d:\d\d-\d:\d\d \|", row)]
        first_run = next(i for i, row in enumerate(rows) if f"lab run {lab.number}" in row)
        predictions = next(i for i, row in enumerate(rows) if "prediction exercises" in row)
        assert predictions < first_run, (lab.number, rows[first_run])


DIAGNOSES = [(lab, e) for lab in LABS for e in lab.exercises if e.kind == "diagnose"]


@pytest.mark.parametrize(("lab", "exercise"), DIAGNOSES, ids=[e.id for _, e in DIAGNOSES])
def test_the_run_a_diagnosis_points_to_does_not_print_the_answer(capsys, lab, exercise) -> None:
    """The ``lab run`` a diagnosis exercise has the student read shows evidence, not the
    finding's name (``--plot`` prints each finding under its detector's name)."""
    command = re.search(r"`minibroker (lab run [^`]+)`", lab.exercise_text(exercise))
    assert command, exercise.id
    assert "--plot" not in command[1], command[1]
    assert cli(shlex.split(command[1])) == 0
    out = capsys.readouterr().out
    assert "PATHOLOGY" in out  # the evidence is there
    assert not [name for name in (*exercise.causes, *exercise.doctor_names) if name in out], out


def _settings(config: dict) -> dict[str, object]:
    """A configuration as ``--set`` names its keys: ``section.key`` and ``destination_policy[PATTERN].key``."""
    flat: dict[str, object] = {}
    for section, body in config.items():
        if section == "destination_policy":
            for entry in body:
                pattern = entry.get("queue") or f"topic:{entry.get('topic')}"
                flat |= {
                    f"destination_policy[{pattern}].{k}": v for k, v in entry.items() if k not in ("queue", "topic")
                }
        elif isinstance(body, dict):
            flat |= {f"{section}.{k}": v for k, v in body.items()}
    return flat


def test_a_fix_the_configuration_text_does_not_name_the_setting_that_cures() -> None:
    """The setting the answer key changes is the exercise's answer: the text (a sweep it
    suggests, say) does not name it."""
    for lab in LABS:
        for exercise in (e for e in lab.exercises if e.kind == "config"):
            text = lab.exercise_text(exercise)
            given = _settings(tomllib.loads(lab.run_named(exercise.run).config_path.read_text(encoding="utf-8")))
            for key in instructor_keys(lab):
                if key.exercise != exercise.id or key.grade != "cured" or key.path.suffix != ".toml":
                    continue
                cure = _settings(tomllib.loads(key.path.read_text(encoding="utf-8")))
                changed = [k for k, v in cure.items() if given.get(k) != v]
                assert changed, key.path
                assert not [k for k in changed if k in text], (lab.number, exercise.id, changed)


_SETS_THE_POISON_ASIDE_AND_HANGS = """
import asyncio

from clients.stomp import StompClient


def consume(host, port, queue, count, work):
    asyncio.run(_consume(host, port, queue, work))


async def _consume(host, port, queue, work):
    client = await StompClient.connect(host, port)
    orders = await client.subscribe(queue, ack="client-individual")
    while True:  # never returns, never settles the poison order
        message = await orders.get(timeout=60)
        try:
            work(message.headers["message-id"], message.body)
        except ValueError:
            continue
        await client.ack(message)
"""


def test_a_service_stopped_with_the_poison_order_unsettled_is_not_cured(tmp_path, monkeypatch) -> None:
    """Lab 07: a service that processes every good order but neither settles the poison order
    nor returns shows no loop within its deadline; the order it holds is still on the orders
    queue when the check stops it, so nothing proves it cured."""
    monkeypatch.setenv("MINIBROKER_LAB_CLIENT_DEADLINE", "10")
    lab = BY_NUMBER["07"]
    exercise = next(e for e in lab.exercises if e.kind == "client")
    service = tmp_path / "service.py"
    service.write_text(_SETS_THE_POISON_ASIDE_AND_HANGS)
    result = check(lab, exercise, service)
    assert result.grade == "still broken", result.lines()
    assert any("the poison order never settled" in line for line in result.lines()), result.lines()
