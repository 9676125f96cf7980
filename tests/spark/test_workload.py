"""Workload files: parsing, planning and the Spark expansion into an action table."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from clients.spark.actions import iter_actions, read_summary
from clients.spark.workload_spec import (
    WorkloadError,
    load_workload,
    parse_workload,
    producer_segments,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "workloads" / "tiny.toml"
EXAMPLES = sorted((ROOT / "examples" / "workloads").glob("*.toml"))


def test_examples_parse():
    for path in EXAMPLES:
        assert load_workload(path).groups(), path


def test_tiny_plan():
    w = load_workload(TINY)
    (p,) = w.producers
    segs = producer_segments(p)
    # two clients staggered by half an interval; the phase [2, 3) pauses them
    assert [(s.client, s.start, s.stop, s.first, s.count, s.offset) for s in segs] == [
        ("p-0", 1.0, 2.0, 0, 10, 0.0),
        ("p-0", 3.0, 4.0, 10, 10, 0.0),
        ("p-1", 1.0, 2.0, 0, 10, 0.5),
        ("p-1", 3.0, 4.0, 10, 10, 0.5),
    ]
    assert segs[2].time_of(0) == pytest.approx(1.05)
    assert w.duration == 10.0 and w.destinations == ("/queue/A",)


def test_scale_multiplies_clients_and_messages_cap():
    doc = {
        "workload": {"duration": 2.0},
        "producers": [{"name": "p", "dest": "/queue/A", "rate": 100.0, "messages": 7}],
    }
    w = parse_workload(doc, scale=3)
    assert [s.count for s in producer_segments(w.producers[0])] == [7, 7, 7]


@pytest.mark.parametrize(
    "doc, message",
    [
        (
            {"producers": [{"name": "p", "dest": "/queue/A", "rate": 1, "stop": 1, "colour": 1}]},
            "unknown key(s) colour",
        ),
        ({"producers": [{"name": "p", "dest": "A", "rate": 1, "stop": 1}]}, "/queue/NAME"),
        ({"producers": [{"name": "p", "dest": "/queue/A", "rate": 1}]}, "needed when"),
        (
            {
                "workload": {"duration": 9},
                "consumers": [
                    {
                        "name": "c",
                        "dest": "/queue/A",
                        "phases": [{"start": 1, "stop": 5, "process": 1}, {"start": 4, "stop": 6, "process": 1}],
                    }
                ],
            },
            "phases overlap",
        ),
        ({"workload": {"duration": 9}, "consumers": [{"name": "c", "dest": "/queue/A", "ack": "sometimes"}]}, "ack"),
        (
            {
                "workload": {"duration": 9},
                "producers": [{"name": "x", "dest": "/queue/A", "rate": 1}],
                "consumers": [{"name": "x", "dest": "/queue/A"}],
            },
            "unique",
        ),
        (
            {
                "workload": {"duration": 9},
                "producers": [
                    {
                        "name": "p",
                        "dest": "/queue/A",
                        "rate": 1,
                        "size": {"dist": "choice", "values": [1, 2], "weights": [1]},
                    }
                ],
            },
            "one weight",
        ),
    ],
)
def test_invalid_workloads_are_refused_with_the_place(doc, message):
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_workload(doc)


@pytest.fixture(scope="module")
def tiny_out(spark, tmp_path_factory):
    from clients.spark.workload import generate

    out = tmp_path_factory.mktemp("tiny")
    generate(spark, load_workload(TINY), out, formats=("parquet", "jsonl"), partitions=3, chunk=3)
    return out


def _rows(df):
    return [r.asDict(recursive=True) for r in df.orderBy("t", "client", "seq").collect()]


@pytest.mark.spark
def test_tiny_action_table_rows(spark, tiny_out):
    actions = list(iter_actions(tiny_out))
    assert [(a.t, a.client, a.seq) for a in actions] == sorted((a.t, a.client, a.seq) for a in actions)
    assert len(actions) == 50
    per_client = Counter((a.client, a.action) for a in actions)
    assert per_client == {
        ("p-0", "connect"): 1,
        ("p-0", "send"): 20,
        ("p-0", "disconnect"): 1,
        ("p-1", "connect"): 1,
        ("p-1", "send"): 20,
        ("p-1", "disconnect"): 1,
        ("c-0", "connect"): 1,
        ("c-0", "subscribe"): 1,
        ("c-0", "pace"): 2,
        ("c-0", "unsubscribe"): 1,
        ("c-0", "disconnect"): 1,
    }
    consumer = [(a.t, a.seq, a.action, a.process) for a in actions if a.client == "c-0"]
    assert consumer == [
        (0.5, 0, "connect", None),
        (0.5, 1, "subscribe", 0.01),
        (5.0, 2, "pace", 0.5),
        (6.0, 3, "pace", 0.01),
        (10.0, 4, "unsubscribe", None),
        (10.0, 5, "disconnect", None),
    ]
    sub = next(a for a in actions if a.action == "subscribe")
    assert (sub.dest, sub.sub, sub.ack, sub.prefetch, sub.selector) == (
        "/queue/A",
        "c-0",
        "client-individual",
        1,
        "kind = 'order'",
    )
    for client, offset in (("p-0", 0.0), ("p-1", 0.05)):
        sends = [a for a in actions if a.client == client and a.action == "send"]
        assert [a.seq for a in sends] == list(range(1, 21))
        expected = [1.0 + offset + j / 10 for j in range(10)] + [3.0 + offset + j / 10 for j in range(10)]
        assert [a.t for a in sends] == pytest.approx(expected)
        last = next(a for a in actions if a.client == client and a.action == "disconnect")
        assert (last.t, last.seq) == (4.0, 21)
    sends = [a for a in actions if a.action == "send"]
    assert all(100 <= a.size <= 199 and a.priority in (1, 9) for a in sends)
    assert all(a.headers["app"] == "tiny" and a.headers["kind"] in ("order", "audit") for a in sends)
    assert {a.persistent for a in sends} == {True, False}
    assert Counter(a.priority for a in sends)[1] > Counter(a.priority for a in sends)[9]
    # the Parquet table holds the same rows
    parquet = _rows(spark.read.parquet(str(tiny_out / "actions.parquet")))
    assert [(r["t"], r["client"], r["seq"], r["size"]) for r in parquet] == [
        (a.t, a.client, a.seq, a.size) for a in actions
    ]
    summary = read_summary(tiny_out)
    assert summary["rows"] == 50 and summary["actions"]["send"] == 40
    assert {c["client"]: c["sends"] for c in summary["clients"]} == {"p-0": 20, "p-1": 20, "c-0": 0}


@pytest.mark.spark
def test_the_parquet_table_streams_the_same_actions_as_the_json_lines(tiny_out):
    """``iter_actions`` reads the Parquet table (pyarrow, no Spark) action for action
    as it reads the JSON lines: the same values, types and order."""
    from_json = list(iter_actions(tiny_out / "actions.jsonl"))
    from_parquet = list(iter_actions(tiny_out / "actions.parquet"))
    assert len(from_parquet) == 50 and from_parquet == from_json
    assert all(isinstance(a.headers, dict) for a in from_parquet if a.action == "send")


@pytest.mark.spark
def test_by_default_only_parquet_is_written_and_it_is_what_is_read(spark, tmp_path):
    from clients.spark.workload import main

    assert main([str(TINY), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["actions.parquet", "summary.json"]
    actions = list(iter_actions(tmp_path / "out"))
    assert len(actions) == 50 and [a.key for a in actions] == sorted(a.key for a in actions)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["formats"] == ["parquet"]


@pytest.mark.spark
def test_same_table_whatever_the_partitioning(spark, tiny_out):
    from clients.spark.workload import build_actions

    w = load_workload(TINY)
    one = _rows(build_actions(spark, w, partitions=1, chunk=1000))
    assert one == _rows(spark.read.parquet(str(tiny_out / "actions.parquet")))
    doc = tomllib.loads(TINY.read_text())
    doc["workload"]["seed"] = 8
    reseeded = _rows(build_actions(spark, parse_workload(doc), partitions=2))
    assert [r["size"] for r in reseeded] != [r["size"] for r in one]


@pytest.mark.spark
def test_random_arrival_and_lognormal_sizes(spark, tmp_path):
    from clients.spark.workload import main

    path = tmp_path / "w.toml"
    path.write_text(
        "[workload]\nseed = 3\nduration = 5.0\n"
        '[[producers]]\nname = "r"\ncount = 3\ndest = "/topic/T"\nrate = 200.0\n'
        'arrival = "random"\nstart = 1.0\nstop = 3.0\npersistent = true\n'
        'size = { dist = "lognormal", median = 1000, sigma = 0.5, min = 100, max = 5000 }\n'
    )
    assert main([str(path), "--out", str(tmp_path / "out"), "--format", "jsonl"]) == 0
    sends = [a for a in iter_actions(tmp_path / "out") if a.action == "send"]
    assert Counter(a.client for a in sends) == {"r-0": 400, "r-1": 400, "r-2": 400}
    assert all(1.0 <= a.t < 3.0 and a.persistent for a in sends)
    sizes = sorted(a.size for a in sends)
    assert sizes[0] >= 100 and sizes[-1] <= 5000 and 800 < sizes[len(sizes) // 2] < 1250
    assert not (tmp_path / "out" / "actions.parquet").exists()
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["actions"]["send"] == 1200


def test_main_refuses_a_bad_file(tmp_path, capsys):
    from clients.spark.workload import main

    path = tmp_path / "bad.toml"
    path.write_text("[workload]\nduration = 1\n")
    assert main([str(path), "--out", str(tmp_path / "o")]) == 2
    assert "no producers and no consumers" in capsys.readouterr().err


# --- the in-process engine: the Spark job's table without a JVM ----------------------

RANDOM_LOGNORMAL = """\
[workload]
seed = 3
duration = 5.0
[[producers]]
name = "r"
count = 3
dest = "/topic/T"
rate = 400.0
arrival = "random"
start = 1.0
stop = 3.0
persistent = 0.3
size = { dist = "lognormal", median = 1000, sigma = 1.5, min = 1, max = 50000 }
priority = { dist = "uniform", min = 0, max = 9 }
headers = { a = { dist = "choice", values = ["x", "y"], weights = [1, 3] }, b = "fixed", c = { dist = "choice", values = [1, 2, 3] } }
[[producers]]
name = "even"
count = 2
dest = "/queue/Q"
rate = 150.0
size = 512
priority = { dist = "choice", values = [4, 9], weights = [19, 1] }
persistent = true
"""

# a seed past 2**31 (Spark hashes it as a long), phases, a cap, client ids, non-ASCII values
PHASES_CAPS = """\
[workload]
seed = 2147483648
duration = 20.0
[[producers]]
name = "ph"
count = 3
dest = "/queue/P"
rate = 50.0
start = 0.5
messages = 700
client_id = true
size = { dist = "choice", values = [100, 2000, 5], weights = [1, 2, 3] }
priority = 7
persistent = false
headers = { h = { dist = "choice", values = ["\u00e9", "\u65e5\u672c"] } }
  [[producers.phases]]
  start = 2.0
  stop = 4.0
  rate = 0.0
  [[producers.phases]]
  start = 5.0
  stop = 6.0
  rate = 400.0
[[consumers]]
name = "only"
count = 2
dest = "/queue/P"
"""


def _inprocess_rows(workload, **kwargs):
    import pyarrow as pa

    from clients.spark.workload_inprocess import part_tables

    order = [("t", "ascending"), ("client", "ascending"), ("seq", "ascending")]
    rows = pa.concat_tables(list(part_tables(workload, **kwargs))).sort_by(order).to_pylist()
    for row in rows:
        if row["headers"] is not None:
            row["headers"] = dict(row["headers"])
    return rows


@pytest.mark.spark
def test_the_xxhash64_reproduced_is_sparks(spark):
    from pyspark.sql import functions as F

    from clients.spark.workload_inprocess import spark_xxhash64

    cases = [
        (1, "orders/size", "orders-0", 5),
        (7, "s" * 40, "a-client-name-long-enough-for-four-lanes-0", 123_456_789),
        (0, "", "", 0),
        (2**40, "abc", "\u00e9t\u00e9-1", -5),
        (-3, "r/h/kind", "r-12", 2**62),
    ]
    for seed, salt, client, k in cases:
        expr = F.xxhash64(F.lit(seed), F.lit(salt), F.lit(client), F.lit(k).cast("long"))
        assert spark.range(1).select(expr).first()[0] == spark_xxhash64(seed, salt, client, k), (seed, salt)


@pytest.mark.spark
@pytest.mark.parametrize("source", ["tiny", "random-lognormal", "phases-caps"])
def test_the_inprocess_engine_writes_the_spark_jobs_table(spark, source, tmp_path):
    """Row for row and value for value: times, sizes (Box-Muller and half-up
    rounding included), priorities, persistence and headers; and Spark reads
    the Parquet it writes as its own."""
    from clients.spark.workload import build_actions
    from clients.spark.workload_inprocess import generate_inprocess

    docs = {"random-lognormal": RANDOM_LOGNORMAL, "phases-caps": PHASES_CAPS}
    workload = load_workload(TINY) if source == "tiny" else parse_workload(tomllib.loads(docs[source]))
    from_spark = _rows(build_actions(spark, workload, partitions=2, chunk=500))
    assert len(from_spark) > (40 if source == "tiny" else 2_000)
    assert _inprocess_rows(workload, part_rows=700, chunk=300) == from_spark
    generate_inprocess(workload, tmp_path, part_rows=900)
    assert _rows(spark.read.parquet(str(tmp_path / "actions.parquet"))) == from_spark


def test_inprocess_parts_are_sorted_bounded_and_merge_to_the_whole_table(tmp_path):
    import pyarrow.parquet as pq

    from clients.spark.workload import main

    assert main([str(TINY), "--out", str(tmp_path), "--part-rows", "7", "--chunk", "3"]) == 0
    parts = sorted((tmp_path / "actions.parquet").iterdir())
    assert len(parts) > 3
    for part in parts:
        rows = pq.read_table(part).to_pylist()
        keys = [(r["t"], r["client"], r["seq"]) for r in rows]
        assert keys == sorted(keys)
        assert len(rows) <= 7 or {r["action"] for r in rows} != {"send"}  # the control rows are one part
    actions = list(iter_actions(tmp_path))
    assert len(actions) == 50 and [a.key for a in actions] == sorted(a.key for a in actions)
    assert json.loads((tmp_path / "summary.json").read_text())["engine"] == "inprocess"


def test_inprocess_json_lines_hold_the_parquet_rows(tmp_path):
    from clients.spark.workload import main

    assert main([str(TINY), "--out", str(tmp_path), "--format", "parquet,jsonl", "--part-rows", "10"]) == 0
    from_json = list(iter_actions(tmp_path / "actions.jsonl"))
    assert from_json == list(iter_actions(tmp_path / "actions.parquet")) and len(from_json) == 50
    line = (tmp_path / "actions.jsonl" / "part-00000.json").read_text().splitlines()[0]
    assert "null" not in line  # null fields left out, as Spark's JSON writer does


def test_a_new_table_replaces_an_earlier_one_in_the_other_format(tmp_path):
    """The reader prefers JSON lines: an earlier run's must not shadow a new Parquet table."""
    from clients.spark.workload import main

    assert main([str(TINY), "--out", str(tmp_path), "--format", "jsonl"]) == 0
    assert main([str(TINY), "--out", str(tmp_path), "--seed", "8"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actions.parquet", "summary.json"]


def test_auto_runs_in_process_unless_spark_is_asked_for(monkeypatch):
    from clients.spark.workload_engine import choose_engine

    monkeypatch.delenv("MINIBROKER_SPARK_MASTER", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert choose_engine("auto", None, "out/dir") == "inprocess"
    assert choose_engine("auto", None, "file:/tmp/out") == "inprocess"
    assert choose_engine("auto", "spark://h:7077", "out") == "spark"
    assert choose_engine("auto", None, "hdfs://nn/out") == "spark"
    assert choose_engine("spark", None, "out") == "spark"
    monkeypatch.setenv("MINIBROKER_SPARK_MASTER", "local[2]")
    assert choose_engine("auto", None, "out") == "spark"
    assert choose_engine("inprocess", None, "out") == "inprocess"


def test_the_inprocess_engine_refuses_what_it_cannot_do_in_one_line(tmp_path, capsys, monkeypatch):
    from clients.spark.workload import main

    monkeypatch.chdir(tmp_path)
    for argv in (
        ["--out", "s3a://bucket/x", "--engine", "inprocess"],
        ["--out", "o", "--master", "local[2]", "--engine", "inprocess"],
    ):
        with pytest.raises(SystemExit) as stop:
            main([str(TINY), *argv])
        assert stop.value.code == 2
    assert "is a URL" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no local directory named like the URL
    (tmp_path / "a-file").write_text("")
    assert main([str(TINY), "--out", str(tmp_path / "a-file" / "sub")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write the table under ") and err.count("\n") == 1
    assert main([str(TINY), "--out", str(tmp_path / "ok")]) == 0
    assert capsys.readouterr().out.endswith("(in process)\n")
