"""``minibroker doctor``: each seed's trap in both syntaxes, clean files, bad files, JSON.

Every fixture in ``tests/data/doctor/`` is mapped to the exact findings it
must produce (severity, check, seed), in report order. The TOML fixtures'
fixes are then applied and must leave no warning; the XML fixes must be
well-formed XML naming ActiveMQ's attributes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from clients.cli import main as cli
from clients.doctor import CHECKS, read
from minibroker.config import parse_config

DATA = Path(__file__).parents[1] / "data" / "doctor"
DOCS = Path(__file__).parents[2] / "docs" / "doctor.md"
SHIPPED_BENCH = Path(__file__).parents[2] / "bench" / "harness" / "activemq" / "conf" / "activemq.xml"

E, W, I = "error", "warning", "info"
STOMP_UNWATCHED = [
    (W, "prefetch-without-write-timeout", "stalled-socket"),
    (W, "no-heart-beats", "stalled-socket"),
    (W, "link-stealing-off", "stalled-socket"),
]
BENCH = [
    (W, "queues-share-memory", "destination-limits"),
    *STOMP_UNWATCHED,
    (I, "topic-slow-consumer-spools", "slow-consumers"),
]

#: fixture -> the findings it must produce, (severity, check, seed) in report order.
EXPECTED: dict[str, list[tuple[str, str, str | None]]] = {
    "clean.toml": [],
    "clean.xml": [],
    "destination-limits-no-limits.toml": [(W, "queues-share-memory", "destination-limits")],
    "destination-limits-no-limits.xml": [(W, "queues-share-memory", "destination-limits")],
    "destination-limits-limits-exceed.toml": [(W, "destination-limits-exceed-broker", "destination-limits")],
    "destination-limits-limits-exceed.xml": [(W, "destination-limits-exceed-broker", "destination-limits")],
    "temp-storage-temp-limit.toml": [(E, "temp-limit-below-temp-file", "temp-storage")],
    "temp-storage-temp-limit.xml": [(E, "temp-limit-below-temp-file", "temp-storage")],
    "temp-storage-memory-above-temp.toml": [(W, "memory-above-temp-limit", "temp-storage")],
    "temp-storage-memory-above-temp.xml": [(W, "memory-above-temp-limit", "temp-storage")],
    "slow-consumers-topics.toml": [(W, "topic-slow-consumer-blocks-producer", "slow-consumers")],
    "slow-consumers-topics.xml": [(W, "topic-slow-consumer-blocks-producer", "slow-consumers")],
    "stalled-socket-stomp.toml": STOMP_UNWATCHED,
    "stalled-socket-stomp.xml": STOMP_UNWATCHED,
    "journal-threshold-ring-priority.toml": [
        (W, "ring-priority-queues", "journal-threshold"),
        (W, "ring-reserves-store", None),
    ],
    "journal-threshold-ring-small.toml": [
        (W, "ring-too-small", "journal-threshold"),
        (W, "ring-reserves-store", None),
        (I, "ring-strands-messages", "journal-threshold"),
    ],
    "limits-too-small.toml": [(E, "store-limit-below-journal-file", None), (W, "memory-limit-tiny", None)],
    "limits-too-small.xml": [(E, "store-limit-below-journal-file", None), (W, "memory-limit-tiny", None)],
    "memory-zero.toml": [(E, "memory-limit-zero", None)],
    "bench-activemq.xml": BENCH,
    "activemq-shipped-5.18.xml": [
        (W, "queues-share-memory", "destination-limits"),
        *STOMP_UNWATCHED,
        (I, "heap-assumed", None),
    ],
    "activemq-shipped-5.3.xml": [
        (W, "topic-slow-consumer-blocks-producer", "slow-consumers"),
        (I, "no-stomp-listener", "stalled-socket"),
    ],
}

DEFAULT = [
    (W, "queues-share-memory", "destination-limits"),
    *STOMP_UNWATCHED,
    (I, "topic-slow-consumer-spools", "slow-consumers"),
]


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli(["doctor", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def findings_of(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    status, out, err = doctor(capsys, *args, "--json")
    assert err == ""
    return status, json.loads(out)


def triples(report: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(f["severity"], f["check"], f["source"]) for f in report["findings"]]


# ---------------------------------------------------------------- each trap, each syntax
def test_every_fixture_is_mapped() -> None:
    assert sorted(p.name for p in DATA.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_gives_exactly_its_findings(name: str, capsys) -> None:
    status, report = findings_of(capsys, str(DATA / name))
    assert triples(report) == EXPECTED[name]
    assert status == report["status"] == (1 if any(s in (E, W) for s, _, _ in EXPECTED[name]) else 0)
    assert report["syntax"] == ("activemq-xml" if name.endswith(".xml") else "toml")
    for f in report["findings"]:
        assert f["headline"] and f["why"]
        if f["severity"] in (E, W):
            assert f["values"] and f["fix"]["text"] and f["fix"]["snippet"] and f["fix"]["changes"]
        if f["source"]:
            assert f"source: {f['source']}" in f["why"]


@pytest.mark.skipif(not SHIPPED_BENCH.exists(), reason="the shared bench configuration is not on this machine")
def test_the_bench_activemq_config_as_shipped(capsys) -> None:
    status, report = findings_of(capsys, str(SHIPPED_BENCH))
    assert status == 1 and triples(report) == BENCH


def test_the_embedded_default_is_reported_honestly(capsys) -> None:
    status, out, err = doctor(capsys)
    assert status == 1 and err == ""
    assert "minibroker/default.toml (the embedded default)" in out
    assert (
        "no queue has a memory limit of its own" in out
    )  # the destination-limits source is a real trap in our default too
    status, report = findings_of(capsys)
    assert triples(report) == DEFAULT


# ---------------------------------------------------------------- values, why and fix, in the input's syntax
def _finding(report: dict[str, Any], check: str) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["check"] == check)


def test_toml_findings_speak_toml(capsys) -> None:
    _, report = findings_of(capsys, str(DATA / "temp-storage-temp-limit.toml"))
    f = _finding(report, "temp-limit-below-temp-file")
    assert 'system_usage.temp_limit = "30 mb"' in f["values"]
    assert 'store.temp_journal_max_file_length = "32 mb" (default)' in f["values"]
    assert f["fix"]["snippet"] == '[system_usage]\ntemp_limit = "128 mb"'
    assert "106%" in f["why"]  # the 32 mb file is 106% of the 30 mb limit, forever


def test_xml_findings_speak_xml(capsys) -> None:
    _, report = findings_of(capsys, str(DATA / "temp-storage-temp-limit.xml"))
    f = _finding(report, "temp-limit-below-temp-file")
    assert '<tempUsage limit="30 mb"/>' in f["values"]
    assert any("journalMaxFileLength> not set: 32 mb (ActiveMQ's default)" in v for v in f["values"])
    assert '<tempUsage limit="128 mb"/>' in f["fix"]["snippet"]
    _, report = findings_of(capsys, str(DATA / "stalled-socket-stomp.xml"))
    snippet = _finding(report, "prefetch-without-write-timeout")["fix"]["snippet"]
    assert snippet == (
        '<transportConnector name="stomp" uri="stomp://0.0.0.0:61613?maximumConnections=1000'
        '&amp;wireFormat.maxFrameSize=10485760&amp;transport.soWriteTimeout=30000"/>'
    )
    assert 'allowLinkStealing="true"' in _finding(report, "link-stealing-off")["fix"]["snippet"]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.endswith(".xml")))
def test_xml_fixes_are_well_formed(name: str, capsys) -> None:
    _, report = findings_of(capsys, str(DATA / name))
    for f in report["findings"]:
        if f["fix"]["snippet"]:
            ET.fromstring(f"<fix>{f['fix']['snippet']}</fix>")
            assert "_" not in f["fix"]["snippet"].replace("tmp_storage", "")  # ActiveMQ's camelCase, not our keys


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value)


def dump_toml(data: dict[str, Any]) -> str:
    lines: list[str] = []
    for key, table in data.items():
        if isinstance(table, dict):
            lines += [f"[{key}]", *(f"{k} = {_toml(v)}" for k, v in table.items())]
    for key, entries in data.items():
        if isinstance(entries, list):
            for entry in entries:
                lines += [f"[[{key}]]", *(f"{k} = {_toml(v)}" for k, v in entry.items())]
    return "\n".join(lines) + "\n"


def apply_changes(data: dict[str, Any], changes: list[dict[str, Any]]) -> None:
    for c in changes:
        value = ",".join(map(str, c["value"])) if isinstance(c["value"], list) else c["value"]
        if "kind" in c:
            entries = data.setdefault("destination_policy", [])
            entry = next((e for e in entries if e.get(c["kind"]) == c["pattern"]), None)
            if entry is None:
                entry = {c["kind"]: c["pattern"]}
                entries.append(entry)
            entry[c["key"]] = value
        else:
            section, option = c["key"].split(".", 1)
            data.setdefault(section, {})[option] = value


@pytest.mark.parametrize("name", [None, *sorted(n for n in EXPECTED if n.endswith(".toml") and EXPECTED[n])])
def test_applying_the_toml_fixes_cures_the_file(name: str | None, tmp_path: Path, capsys) -> None:
    from minibroker.config import default_config_text

    text = default_config_text() if name is None else (DATA / name).read_text()
    _, report = findings_of(capsys, *([] if name is None else [str(DATA / name)]))
    for f in report["findings"]:
        tomllib.loads(f["fix"]["snippet"])  # every TOML snippet is TOML
    data = tomllib.loads(text)
    apply_changes(data, [c for f in report["findings"] for c in f["fix"]["changes"]])
    parse_config(data)
    cured = tmp_path / "cured.toml"
    cured.write_text(dump_toml(data))
    status, after = findings_of(capsys, str(cured))
    assert status == 0, triples(after)


# ---------------------------------------------------------------- severity rules
def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_stomp_findings_are_notes_once_something_watches_the_socket(tmp_path: Path, capsys) -> None:
    path = write(
        tmp_path,
        "c.toml",
        "[transport]\nso_write_timeout = 30000\n"
        '[[destination_policy]]\nqueue = ">"\nmemory_limit = "4 mb"\n'
        '[[destination_policy]]\ntopic = ">"\nabort_slow_consumer = true\n',
    )
    status, report = findings_of(capsys, path)
    assert status == 0
    assert triples(report) == [(I, "no-heart-beats", "stalled-socket"), (I, "link-stealing-off", "stalled-socket")]


def test_temp_trap_without_file_cursors_is_a_latent_warning(tmp_path: Path, capsys) -> None:
    path = write(
        tmp_path,
        "t.toml",
        '[system_usage]\ntemp_limit = "16 mb"\n'
        '[[destination_policy]]\nqueue = ">"\npending_cursor = "vm"\n'
        '[[destination_policy]]\ntopic = ">"\npending_cursor = "vm"\n',
    )
    _, report = findings_of(capsys, path)
    f = _finding(report, "temp-limit-below-temp-file")
    assert f["severity"] == W and "not sprung" in f["why"]


def test_partial_queue_limits_are_a_note_naming_the_uncovered_queues(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, "p.toml", '[[destination_policy]]\nqueue = "backlog.>"\nmemory_limit = "4 mb"\n')
    _, report = findings_of(capsys, path)
    f = _finding(report, "queues-share-memory")
    assert f["severity"] == I and 'queues matching ">"' in f["headline"]


def test_xml_default_entry_and_several_stomp_connectors(tmp_path: Path, capsys) -> None:
    path = write(
        tmp_path,
        "a.xml",
        """<broker><destinationPolicy><policyMap>
      <policyEntries><policyEntry topic=">"><slowConsumerStrategy><abortSlowConsumerStrategy abortConnection="true"/>
      </slowConsumerStrategy></policyEntry></policyEntries>
      <defaultEntry><policyEntry memoryLimit="8 mb"/></defaultEntry></policyMap></destinationPolicy>
      <transportConnectors>
        <transportConnector name="a" uri="stomp://0.0.0.0:61613?transport.soWriteTimeout=5000&amp;transport.defaultHeartBeat=5000,5000" allowLinkStealing="true"/>
        <transportConnector name="b" uri="stomp+ssl://0.0.0.0:61612"/>
      </transportConnectors></broker>""",
    )
    _, report = findings_of(capsys, path)
    assert triples(report) == STOMP_UNWATCHED  # only connector "b"; the default entry limits the queues
    assert all('name="b"' in f["fix"]["snippet"] for f in report["findings"])


def test_heap_sets_percent_of_jvm_heap(capsys) -> None:
    _, report = findings_of(capsys, str(DATA / "activemq-shipped-5.18.xml"), "--heap", "2 gb")
    assert "heap-assumed" not in [f["check"] for f in report["findings"]]
    assert "1.4 gb" in _finding(report, "queues-share-memory")["headline"]


# ---------------------------------------------------------------- bad files
BAD = [
    ("missing.toml", None, "cannot read configuration file"),
    ("broken.toml", "[system_usage\nmemory_limit = 1\n", "is not valid TOML"),
    ("value.toml", '[system_usage]\ntemp_limit = "lots"\n', "bad value for 'system_usage.temp_limit': 'lots'"),
    ("key.toml", '[store]\nlayuot = "ring"\n', "unknown key 'store.layuot'"),
    ("binary.toml", b"\xff\xfe[x]", "is neither XML nor UTF-8 TOML"),
    ("broken.xml", "<broker><systemUsage>", "is not well-formed XML"),
    ("beans.xml", "<beans/>", "has no <broker> element"),
    (
        "value.xml",
        '<broker><systemUsage><systemUsage><tempUsage><tempUsage limit="lots"/></tempUsage></systemUsage>'
        "</systemUsage></broker>",
        "bad value for <tempUsage limit>: 'lots'",
    ),
    (
        "flag.xml",
        '<broker><destinationPolicy><policyMap><policyEntries><policyEntry queue=">" prioritizedMessages="yes"/>'
        "</policyEntries></policyMap></destinationPolicy></broker>",
        "prioritizedMessages: 'yes' (expected true or false)",
    ),
    (
        "placeholder.xml",
        '<broker><systemUsage><systemUsage><memoryUsage><memoryUsage limit="${mem}"/></memoryUsage>'
        "</systemUsage></systemUsage></broker>",
        "does not resolve ${...} placeholders",
    ),
]


@pytest.mark.parametrize("json_output", [False, True])
@pytest.mark.parametrize("name,content,message", BAD)
def test_bad_file_is_one_line_and_status_2(
    name: str, content: str | bytes | None, message: str, json_output: bool, tmp_path: Path, capsys
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    status, out, err = doctor(capsys, str(path), *(["--json"] if json_output else []))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("minibroker doctor: ") and message in err


def test_bad_heap_and_a_directory_are_refused(tmp_path: Path, capsys) -> None:
    status, _, err = doctor(capsys, str(DATA / "clean.xml"), "--heap", "lots")
    assert status == 2 and "bad --heap 'lots'" in err
    status, _, err = doctor(capsys, str(tmp_path))
    assert status == 2 and "cannot read configuration file" in err


def test_no_traceback_from_the_real_command(tmp_path: Path) -> None:
    # (not "python -m clients.cli": run as __main__, cli.py's CommandError is a second class that it does not catch)
    entry = "import sys; from clients.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", entry, "doctor", str(tmp_path / "nope.xml")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# ---------------------------------------------------------------- report shapes
def test_json_shape(capsys) -> None:
    status, report = findings_of(capsys, str(DATA / "stalled-socket-stomp.toml"))
    assert set(report) == {"source", "syntax", "status", "counts", "findings"}
    assert report["counts"] == {E: 0, W: 3, I: 0} and report["status"] == status == 1
    f = report["findings"][0]
    assert set(f) == {"check", "severity", "source", "headline", "values", "why", "fix"}
    assert set(f["fix"]) == {"text", "snippet", "changes"}
    assert f["fix"]["changes"] == [{"key": "transport.so_write_timeout", "value": 30000, "listener": "transport"}]
    assert all(isinstance(v, str) for v in f["values"])


def test_text_report_groups_by_severity(capsys) -> None:
    status, out, _ = doctor(capsys, str(DATA / "journal-threshold-ring-small.toml"))
    assert status == 1
    lines = out.splitlines()
    assert lines[1] == "0 errors, 2 warnings, 1 note"
    assert lines.index("Warnings (2)") < lines.index("Notes (1)")
    headline, second = (line for line in lines if line.startswith("warning "))
    assert headline.startswith("warning [journal-threshold] ring-too-small: the ring journal holds 9.6 mb per queue")
    assert second.startswith(
        "warning [config] ring-reserves-store: the store limit 10 gb holds the rings of 853 "
        "destinations (8 x 1536 kb = 12 mb each)"
    )
    body = lines[lines.index(headline) + 1 : lines.index(second) - 1]
    assert body and all(line.startswith("    ") for line in body)
    assert lines[-2:] == [
        "Sources cited",
        '  journal-threshold: "Enqueue threshold exceptions triggered for qpid queue with few '
        'messages only" (Red Hat knowledge base, MRG Messaging 2, undated): ring journal: enqueue capacity '
        "threshold exceeded",
    ]


def test_clean_text_report(capsys) -> None:
    status, out, _ = doctor(capsys, str(DATA / "clean.toml"))
    assert status == 0 and out.splitlines()[-1] == "No problems found."


def test_docs_describe_every_check() -> None:
    text = DOCS.read_text()
    ids = {check for findings in [*EXPECTED.values(), DEFAULT] for _, check, _ in findings}
    assert [i for i in sorted(ids) if f"`{i}`" not in text] == []


def test_every_check_fires_on_some_fixture() -> None:
    setups = [read(None), *(read(DATA / name) for name in EXPECTED)]
    silent = [fn.__name__ for _, fn in CHECKS if not any(fn(s) for s in setups)]
    assert silent == []
