"""The trace's Parquet form: rolling segments written by the writer process, typed as the
Spark reader's schema, never half-visible, and never imported by the broker's process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from minibroker.config import BrokerConfig
from minibroker.errors import ConfigError
from minibroker.trace import FIELDS, Trace
from minibroker.trace.parquet import SCHEMA, SegmentWriter, convert_file, lines_to_table, read_events
from minibroker.trace.segments import segment_files, twin_dir

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "sample-trace.jsonl"


def _decoded(path: Path) -> list[dict]:
    """A JSON-lines trace as a reader of the contract sees it: known fields, no nulls."""
    return [
        {k: v for k, v in json.loads(line).items() if k in FIELDS and v is not None}
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _emit_some(trace: Trace, n: int) -> None:
    for i in range(n):
        trace.emit("expire", dest="/queue/q", msg=f"m-{i}")
    trace.emit("journal_roll", store="s", layout="ring", file="f1", files=2, file_live={"f0": 3, "f1": 0})
    trace.emit("error", message='a "quoted" file_live: text\nand a newline', fatal=False)


def test_the_parquet_form_holds_every_value_of_the_json_lines_with_the_spark_types() -> None:
    data = SAMPLE.read_bytes()
    table = lines_to_table(data)
    # one typed column per field of the contract, in the Spark reader's order
    from clients.spark.schema import trace_schema

    assert table.schema.names == [f.name for f in trace_schema().fields]
    kinds = {"str": "string", "int": "int64", "float": "double", "bool": "bool"}
    for name, kind in FIELDS.items():
        assert str(table.schema.field(name).type) == kinds.get(kind, "map<string, int64>"), name
    rows = [{k: v for k, v in r.items() if v is not None} for r in table.to_pylist()]
    for r in rows:
        if "file_live" in r:
            r["file_live"] = dict(r["file_live"])
    assert rows == _decoded(SAMPLE)


def test_the_writer_process_writes_both_forms_of_the_same_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    trace = Trace(path, lambda: 2.5, broker="b", offload=True, format="both")
    _emit_some(trace, 1000)
    trace.close()
    assert trace.error is None
    (segment,) = segment_files(twin_dir(path))
    assert segment.name == "part-00000.parquet"
    schema = pq.read_schema(segment)
    assert schema.equals(SCHEMA) and schema.metadata == {b"minibroker.trace.schema_version": b"1"}
    assert list(read_events(twin_dir(path))) == _decoded(path)
    assert len(_decoded(path)) == 1002


def test_format_parquet_writes_the_segments_alone_and_a_new_trace_replaces_every_form(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"v":1,"seq":1,"ts":0,"event":"start","broker":"earlier"}\n')
    old = Path(twin_dir(path))
    old.mkdir()
    for name in ("part-00000.parquet", "part-00007.parquet", ".part-00008.parquet.tmp"):
        (old / name).write_bytes(b"an earlier run's")
    (old / "notes.txt").write_text("not a segment: left alone")
    trace = Trace(path, lambda: 1.0, broker="b", offload=True, format="parquet")
    _emit_some(trace, 10)
    trace.close()
    assert trace.error is None
    assert not path.exists()  # the earlier run's JSON lines would pass for this one's
    assert sorted(p.name for p in old.iterdir()) == ["notes.txt", "part-00000.parquet"]
    events = list(read_events(old))
    assert [e["seq"] for e in events] == list(range(1, 13)) and {e["broker"] for e in events} == {"b"}
    # and JSON lines alone remove the Parquet twin of the run before
    trace = Trace(path, lambda: 1.0, broker="b", offload=True, format="jsonl")
    _emit_some(trace, 1)
    trace.close()
    assert segment_files(old) == [] and len(_decoded(path)) == 3


def test_segments_roll_by_events_and_a_reader_sees_only_complete_ones(tmp_path: Path) -> None:
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    directory = tmp_path / "t.jsonl.parquet"
    now = [0.0]
    w = SegmentWriter(directory, segment_events=10, group_lines=4, clock=lambda: now[0])
    for line in lines[:9]:
        w.write(line)
    # two row groups written, a third pending: the open segment is a hidden temporary file
    assert segment_files(directory) == []
    assert [p.name for p in directory.iterdir()] == [".part-00000.parquet.tmp"]
    for line in lines[9:]:
        w.write(line)
    w.close()
    files = segment_files(directory)
    assert [p.name for p in files] == [f"part-{i:05d}.parquet" for i in range(len(files))]
    assert len(files) == 4 and sorted(p.name for p in directory.iterdir()) == [p.name for p in files]
    assert all(pq.ParquetFile(p).metadata.num_rows == 12 for p in files[:-1])  # 10 events, rounded up to groups
    assert w.rows == len(lines) == sum(pq.ParquetFile(p).metadata.num_rows for p in files)
    assert list(read_events(directory)) == _decoded(SAMPLE)


def test_a_segment_is_closed_once_its_first_line_is_old_enough(tmp_path: Path) -> None:
    directory = tmp_path / "slow.parquet"
    now = [100.0]
    w = SegmentWriter(directory, segment_seconds=60, clock=lambda: now[0])
    w.write(b'{"v":1,"seq":1,"ts":0,"event":"start","broker":"b"}\n')
    now[0] += 59
    w.poll()
    assert segment_files(directory) == []
    now[0] += 1
    w.poll()
    assert [p.name for p in segment_files(directory)] == ["part-00000.parquet"]
    w.poll()  # nothing new: no empty segment
    w.close()
    assert len(segment_files(directory)) == 1


def test_convert_file_writes_a_json_lines_trace_as_segments(tmp_path: Path) -> None:
    rows = convert_file(SAMPLE, tmp_path / "s.parquet", chunk=1000, segment_events=20, group_lines=8)
    assert rows == len(_decoded(SAMPLE))
    assert len(segment_files(tmp_path / "s.parquet")) > 1
    assert list(read_events(tmp_path / "s.parquet")) == _decoded(SAMPLE)


def test_the_broker_process_never_imports_pyarrow(tmp_path: Path) -> None:
    """The server's trace with Parquet: the segments are there, pyarrow is not in the broker."""
    script = textwrap.dedent(
        f"""
        import sys
        from minibroker.config import BrokerConfig
        from minibroker.edge.server import open_trace
        config = BrokerConfig().replace(broker={{"trace": {str(tmp_path / "t.jsonl")!r}, "trace_format": "parquet"}})
        trace = open_trace(config)
        trace.emit("expire", dest="/queue/q", msg="m-1")
        trace.close()
        assert trace.error is None, trace.error
        print("pyarrow" in sys.modules)
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
    assert [e["event"] for e in read_events(twin_dir(tmp_path / "t.jsonl"))] == ["expire"]


def test_parquet_without_pyarrow_is_refused_with_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    import importlib.util

    from minibroker.edge import server

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    config = BrokerConfig().replace(broker={"trace": str(tmp_path / "t.jsonl"), "trace_format": "both"})
    with pytest.raises(ConfigError, match=r"trace_format = 'both' needs pyarrow, which is not installed"):
        server.open_trace(config)
    assert not (tmp_path / "t.jsonl").exists()


def test_the_default_trace_is_both_forms_where_pyarrow_is_installed(tmp_path: Path) -> None:
    """``serve --trace FILE`` with the defaults writes the Parquet twin the analysis reads
    fastest beside the JSON lines, and says so at start."""
    script = textwrap.dedent(
        f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
        from minibroker.config import BrokerConfig
        from minibroker.edge.server import open_trace
        trace = open_trace(BrokerConfig().replace(broker={{"trace": {str(tmp_path / "t.jsonl")!r}}}))
        trace.emit("expire", dest="/queue/q", msg="m-1")
        trace.close()
        assert trace.error is None, trace.error
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "as JSON lines and as Parquet segments" in p.stdout
    assert [json.loads(line)["event"] for line in (tmp_path / "t.jsonl").read_text().splitlines()] == ["expire"]
    assert [e["event"] for e in read_events(twin_dir(tmp_path / "t.jsonl"))] == ["expire"]


def test_the_default_trace_is_json_lines_alone_without_pyarrow_and_says_why(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    import importlib.util
    import logging

    from minibroker.edge import server

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with caplog.at_level(logging.INFO, logger="minibroker.server"):
        trace = server.open_trace(BrokerConfig().replace(broker={"trace": str(tmp_path / "t.jsonl")}))
    assert trace is not None
    trace.close()
    assert (tmp_path / "t.jsonl").exists() and not Path(twin_dir(tmp_path / "t.jsonl")).exists()
    assert "JSON lines only: pyarrow is not installed" in caplog.text


def test_trace_form_auto() -> None:
    from minibroker.edge.server import trace_form

    assert [trace_form("auto", pyarrow=True), trace_form("auto", pyarrow=False)] == ["both", "jsonl"]
    assert [trace_form(form, pyarrow=False) for form in ("jsonl", "parquet", "both")] == ["jsonl", "parquet", "both"]


def test_parquet_needs_the_writer_process() -> None:
    with pytest.raises(ValueError, match="needs offload=True"):
        Trace("unused.jsonl", lambda: 0.0, format="parquet")
