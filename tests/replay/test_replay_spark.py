"""The whole pipeline through ``clients.cli.main``: generate a workload with Spark,
replay it against the real broker, analyse the client-side trace with Spark.

One JVM for the module (the ``spark`` fixture); the three commands run once
and the tests read what they wrote.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

import clients.cli

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

WORKLOAD = """
[workload]
name = "pipeline"
seed = 5
duration = 2.5

[[producers]]
name = "p"
count = 2
dest = "/queue/W"
rate = 20.0
start = 0.5
stop = 1.5
size = { dist = "uniform", min = 100, max = 199 }
priority = { dist = "choice", values = [1, 9] }
persistent = 0.5

[[producers]]
name = "t"
dest = "/topic/W"
rate = 10.0
start = 0.5
stop = 1.5

[[consumers]]
name = "c"
dest = "/queue/W"
ack = "client-individual"
prefetch = 5
process = 0.002

[[consumers]]
name = "s"
count = 2
dest = "/topic/W"
"""


@pytest.fixture(scope="module")
def pipeline(spark, module_broker, tmp_path_factory):
    d = tmp_path_factory.mktemp("pipeline")
    (d / "w.toml").write_text(WORKLOAD)
    assert clients.cli.main(["workload", "generate", str(d / "w.toml"), "--out", str(d / "w")]) == 0
    broker = module_broker
    assert (
        clients.cli.main(
            [
                "replay",
                str(d / "w"),
                "--port",
                str(broker.port),
                "--trace",
                str(d / "client.jsonl"),
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    assert clients.cli.main(["analyze", str(d / "client.jsonl"), "--out", str(d / "analysis"), "--bucket", "0.5"]) == 0
    return d


@pytest.fixture(scope="module")
def module_broker():
    """The real broker for the module (the pipeline runs once)."""
    from broker_support import RunningBroker
    from minibroker.config import BrokerConfig

    broker = RunningBroker(BrokerConfig()).start()
    yield broker
    broker.stop()


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_replayed_workload_is_analysed_per_consumer(pipeline) -> None:
    summary = json.loads((pipeline / "w" / "summary.json").read_text())
    sends = summary["actions"]["send"]
    assert sends == 2 * 20 + 10
    events = [json.loads(line) for line in (pipeline / "client.jsonl").read_text().splitlines()]
    kinds = Counter(e["event"] for e in events)
    assert (kinds["sent"], kinds["received"], kinds["acked"]) == (sends, 40 + 2 * 10, 40)

    report = (pipeline / "analysis" / "report.md").read_text()
    assert str(pipeline / "client.jsonl") in report
    assert f"lines read: {len(events)} (0 unreadable" in report
    assert "![Per-consumer receive rates](consumers.png)" in report
    assert (pipeline / "analysis" / "consumers.png").stat().st_size > 0
    rates = _csv(pipeline / "analysis" / "csv" / "consumer_rates.csv")
    per_consumer = Counter()
    for r in rates:
        assert r["source"] == "client"
        per_consumer[(r["consumer"], r["dest"])] += int(r["received"])
    assert per_consumer == {("c-0", "/queue/W"): 40, ("s-0", "/topic/W"): 10, ("s-1", "/topic/W"): 10}
    assert sum(int(r["acked"]) for r in rates if r["consumer"] == "c-0") == 40
    assert json.loads((pipeline / "analysis" / "findings.json").read_text()) == []


def test_replayed_workload_is_analysed_per_destination(pipeline) -> None:
    rates = _csv(pipeline / "analysis" / "csv" / "dest_rates.csv")
    assert {r["dest"] for r in rates} == {"/queue/W", "/topic/W"}
    queue = [r for r in rates if r["dest"] == "/queue/W"]
    assert sum(int(r.get("client_sent") or r["enqueued"]) for r in queue) == 40
    assert sum(int(r.get("client_received") or r["dispatched"]) for r in queue) == 40
