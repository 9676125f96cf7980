"""Finding and checking the action table; the counters, histograms and progress bar."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from replay_tables import producer, write_table

from clients.replay import ReplayError, open_table, parse_shard, shard
from clients.replay.progress import Progress, bar
from clients.replay.stats import ErrorLog, Histogram
from clients.spark.session import spark_error


def job_output(tmp_path, formats=("jsonl",)):
    """A directory shaped like the workload job's output (two sorted part files)."""
    out = tmp_path / "out"
    rows = producer("p-0", "/queue/A", [0.1, 0.2, 0.3]) + producer("p-1", "/queue/A", [0.15, 0.25])
    for fmt in formats:
        d = out / f"actions.{fmt}"
        d.mkdir(parents=True)
        if fmt == "jsonl":
            write_table(d / "part-00000-x-c000.json", [r for r in rows if r["client"] == "p-0"])
            write_table(d / "part-00001-x-c000.json", [r for r in rows if r["client"] == "p-1"])
            (d / "_SUCCESS").write_text("")
        else:
            (d / "part-00000-x-c000.snappy.parquet").write_bytes(b"PAR1")
    (out / "summary.json").write_text(json.dumps({"rows": len(rows), "duration": 0.3, "clients": [{}, {}]}))
    return out, rows


@pytest.mark.parametrize("where", ["out", "out/actions.jsonl", "out/actions.parquet"])
def test_the_job_output_is_found_from_any_of_its_paths(tmp_path, where) -> None:
    out, rows = job_output(tmp_path, formats=("jsonl", "parquet"))
    table = open_table(tmp_path / where)
    assert table.path == out / "actions.jsonl"
    assert (table.rows, table.duration, table.clients) == (len(rows), 0.3, 2)
    got = list(table.actions())
    assert [(a.t, a.client, a.seq) for a in got] == sorted((r["t"], r["client"], r["seq"]) for r in rows)


def test_a_single_file_is_a_table(tmp_path) -> None:
    path = write_table(tmp_path / "a.jsonl", producer("p-0", "/queue/A", [0.1]))
    table = open_table(path)
    assert [a.action for a in table.actions()] == ["connect", "send", "disconnect"]
    assert table.rows is None


def _without(monkeypatch, *modules: str) -> None:
    """Make ``modules`` (and their submodules) fail to import, as on a machine without them."""
    import builtins

    real_import = builtins.__import__

    def guarded(name, *args, **kw):
        if any(name == m or name.startswith(m + ".") for m in modules):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", guarded)


def test_parquet_only_needs_pyarrow_or_spark_or_says_how(tmp_path, monkeypatch) -> None:
    out, _ = job_output(tmp_path, formats=("parquet",))
    _without(monkeypatch, "pyspark", "pyarrow")
    with pytest.raises(ReplayError, match="only Parquet.*pyarrow or Spark.*--format parquet,jsonl"):
        open_table(out)


def test_parquet_only_is_streamed_directly_without_spark(tmp_path, monkeypatch) -> None:
    """The job's default output (Parquet alone) plays without a JVM: pyarrow reads the
    sorted part files and they are merged in time order, headers as a dict."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    s, i64, f64, i32 = pa.string(), pa.int64(), pa.float64(), pa.int32()
    schema = pa.schema(  # as the workload job writes it
        [("t", f64), ("client", s), ("seq", i64), ("action", s), ("group", s), ("dest", s), ("sub", s)]
        + [("size", i64), ("priority", i32), ("persistent", pa.bool_()), ("headers", pa.map_(s, s))]
        + [("selector", s), ("ack", s), ("prefetch", i32), ("process", f64), ("client_id", s)]
    )
    out = tmp_path / "out"
    d = out / "actions.parquet"
    d.mkdir(parents=True)
    rows = producer("p-0", "/queue/A", [0.1, 0.3], headers={"k": "v"}) + producer("p-1", "/queue/A", [0.2])
    for i, client in enumerate(("p-0", "p-1")):
        mine = [{c: r.get(c) for c in schema.names} for r in rows if r["client"] == client]
        pq.write_table(pa.Table.from_pylist(mine, schema=schema), d / f"part-0000{i}-x-c000.snappy.parquet")
    _without(monkeypatch, "pyspark")
    table = open_table(out)
    assert table.path == d and table.cleanup is None  # no conversion
    got = list(table.actions())
    assert [(a.t, a.client, a.seq) for a in got] == sorted((r["t"], r["client"], r["seq"]) for r in rows)
    assert [a.headers for a in got if a.action == "send"] == [{"k": "v"}, None, {"k": "v"}]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing", "no such action table"),
        (lambda d: d, "no action table under"),
    ],
)
def test_missing_tables_are_refused(tmp_path, make, message) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReplayError, match=message):
        open_table(make(tmp_path / "empty"))


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            [
                '{"t": 1, "client": "a", "seq": 0, "action": "connect", "group": "a"}',
                '{"t": 0.5, "client": "b", "seq": 0, "action": "connect", "group": "b"}',
            ],
            "sorted by t",
        ),
        (['{"t": 0, "client": "a", "seq": 0, "action": "dance", "group": "a"}'], "unknown action 'dance'"),
        (['{"t": 0, "client": "a", "seq": 1, "action": "send", "group": "a"}'], "send\\): no dest"),
        (['{"t": 0, "client": "a", "seq": 0, "action": "connect", "group": "a", "colour": 1}'], "bad action table"),
        (["not json"], "bad action table"),
    ],
)
def test_bad_rows_are_refused_with_the_row(tmp_path, lines, message) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReplayError, match=message):
        list(open_table(path).actions())


def test_histogram_percentiles_within_five_percent() -> None:
    h = Histogram()
    values = [i / 1000 for i in range(1, 1001)]  # 1 ms .. 1 s
    for v in values:
        h.record(v, key=v)
    assert h.count == 1000 and h.max == 1.0 and h.max_key == 1.0
    for p, exact in ((50, 0.5), (90, 0.9), (99, 0.99)):
        assert exact <= h.percentile(p) <= exact * 1.05
    assert h.mean == pytest.approx(0.5005)
    h.record(-0.01)  # early counts as on time
    assert h.percentile(0.01) == 0.0
    assert Histogram().summary() == "none" and Histogram().percentile(99) == 0.0
    assert "p99" in h.summary() and h.summary().endswith("max 1,000 ms")


def test_error_log_counts_and_reports_new_messages_once() -> None:
    log = ErrorLog()
    assert log.add("a", "boom") is True
    assert log.add("b", "boom") is False
    assert log.add("c", "bang") is True
    assert log.count == 3 and log.lines() == ["2 x boom (first: a)", "1 x bang (first: c)"]


def test_progress_bar_draws_in_place_and_clears() -> None:
    assert bar(0.5, 10) == "[#####-----]" and bar(2, 4) == "[####]"

    class R:  # what the bar reads from a Replayer
        from clients.replay.stats import Counters

        counters = Counters(sent=5, received=4, acked=3, connected=2)
        errors = ErrorLog()
        recent_lag = 0.0123

    stream = io.StringIO()
    p = Progress(stream, duration=10.0)
    p.update(1.0, 4.2, R())
    line = stream.getvalue()
    assert line.startswith("\rreplay [") and " 42% t 4.2/10 s" in line
    assert "sent 5" in line and "behind 12.3 ms" in line
    p.clear()
    assert stream.getvalue().endswith("\r")
    assert "t 4.2 s" in Progress(io.StringIO(), None).line(1.0, 4.2, R())


def test_job_output_without_summary(tmp_path) -> None:
    out, _ = job_output(tmp_path)
    (out / "summary.json").unlink()
    assert open_table(out).rows is None
    shutil.rmtree(out / "actions.jsonl")
    with pytest.raises(ReplayError):
        open_table(out)


def test_shards_split_the_clients_between_processes(tmp_path) -> None:
    rows = [r for i in range(20) for r in producer(f"p-{i}", "/queue/A", [0.1 * i])]
    path = write_table(tmp_path / "a.jsonl", rows)
    parts = [list(shard(open_table(path).actions(), i, 3)) for i in range(3)]
    clients = [{a.client for a in part} for part in parts]
    assert set().union(*clients) == {f"p-{i}" for i in range(20)}
    assert sum(len(c) for c in clients) == 20 and all(clients)  # disjoint, none empty
    assert sum(len(p) for p in parts) == len(rows)
    assert [a.client for a in shard(open_table(path).actions(), 1, 3)] == [a.client for a in parts[1]]
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "-1/2", "1", "a/b"):
        with pytest.raises(ValueError, match="I/N"):
            parse_shard(bad)


def test_spark_errors_are_shown_by_their_java_message() -> None:
    class Py4JLike(Exception):
        java_exception = "org.apache.spark.SparkException: [FAILED_READ_FILE] footer\n\tat ..."

    assert spark_error(Py4JLike("An error occurred while calling o42.parquet.")) == (
        "org.apache.spark.SparkException: [FAILED_READ_FILE] footer"
    )
    assert spark_error(ValueError("first\nsecond")) == "first"
    assert spark_error(ValueError("")) == "ValueError"
