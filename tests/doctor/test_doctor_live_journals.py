"""``doctor --live`` on the real server while the journal labs' workloads run: a ring refusing
enqueues (lab 04) and a store kept full by a few live messages (lab 06), and their controls.

Lab 04's ``selector`` workload on its ``ring.toml`` (8 files of 64 KiB): one message per file
that the only consumer's selector never takes, until the ring refuses an enqueue; the doctor
must name the queue's journal refusing while it holds a handful of messages. The same
traffic with every message consumed (``all-consumed``) goes round the ring: nothing found.

Lab 06's ``offline-durable`` workload on its ``kahadb.toml`` (64 KiB files, a 1 MiB store):
a durable subscriber gone away keeps one event, acks chain every later file to it, the store
fills and the shop is held: the doctor must name the store held by a few live messages and
the topic that keeps them. With ``subscriber-timeout`` the subscription is removed after 5 s
offline and the journal never fills: nothing found.
"""

from __future__ import annotations

from typing import Any

import pytest

from clients.doctor.live import LiveReport
from tests.broker_support import RunningBroker
from tests.doctor_live_support import doctor_during_run, fill_the_ring, keep_the_journal_alive, lab_and_scenario

pytestmark = pytest.mark.slow

RING_LAB, RING = lab_and_scenario("04-journal-threshold")
KAHADB_LAB, KAHADB = lab_and_scenario("06-journal-kept-alive")

#: Lab 04's workload: the ring refuses within a few seconds, then the shortest finding (5 s).
RING_SECONDS = 10.0
#: Lab 06's workload: at the lab's pace the 1 MiB store fills in 7 to 12 s here, then 5 s held.
KAHADB_SECONDS = 22.0


def _ring(run: str) -> tuple[LiveReport, dict[str, Any]]:
    def play(broker: RunningBroker) -> Any:
        def current_file() -> int:
            return int(broker.call(lambda: broker.server.broker.store.journal_for(RING.QUEUE).current_file_id))

        return fill_the_ring(broker.port, current_file, run == "selector", RING_SECONDS, RING)

    return doctor_during_run(RING_LAB, run, play, RING_SECONDS - 1)


def _kahadb(run: str) -> tuple[LiveReport, dict[str, Any]]:
    return doctor_during_run(
        KAHADB_LAB,
        run,
        lambda broker: keep_the_journal_alive(broker.port, KAHADB_SECONDS, KAHADB),
        KAHADB_SECONDS - 1,
    )


def test_a_ring_refusing_enqueues_with_a_handful_of_messages() -> None:
    report, played = _ring("selector")
    assert RING.THRESHOLD_TEXT in (played["refusal"] or ""), played
    assert [(f.pathology, f.subject) for f in report.findings] == [("journal_full_few_live", RING.QUEUE)], [
        f.headline for f in report.findings
    ]
    finding = report.findings[0]
    assert finding.fix.lab == "04-journal-threshold" and "journal compact" in finding.fix.text
    assert finding.end - finding.start >= 5
    assert all(v["live_messages"] <= 8 and v["journal_files"] == 8 for _, v in finding.series), finding.series


def test_the_same_traffic_all_consumed_nothing_found() -> None:
    report, played = _ring("all-consumed")
    assert played["refusal"] is None and played["rounds"] > 8, played  # round the ring and more
    assert report.findings == (), [f.headline for f in report.findings]


def test_a_store_held_full_by_a_few_live_messages_of_an_offline_subscriber() -> None:
    report, played = _kahadb("offline-durable")
    assert played["waited"] >= 5, played  # the shop is held
    assert [(f.pathology, f.subject) for f in report.findings] == [("store_held_by_few_live", "store")], [
        f.headline for f in report.findings
    ]
    finding = report.findings[0]
    assert finding.culprits == (KAHADB.EVENTS,) and finding.culprit_role == "kept by"
    assert finding.fix.lab == "06-journal-kept-alive" and "offline_durable_subscriber_timeout" in finding.fix.text
    assert finding.end - finding.start >= 5
    for _, v in finding.series:
        assert v["store_pct"] >= 99 and v["blocked_producers"] >= 1, v
        assert v["files_with_live"] < v["journal_files"] and v["live_messages"] <= 10 * v["journal_files"], v


def test_the_offline_subscriber_removed_after_a_timeout_nothing_found() -> None:
    report, played = _kahadb("subscriber-timeout")
    assert played["waited"] < 5, played
    assert report.findings == (), [f.headline for f in report.findings]
