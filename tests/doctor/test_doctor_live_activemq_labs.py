"""``doctor --live`` on ActiveMQ while labs 06 and 07 play their live workloads on it.

Each run starts ActiveMQ as the lab's ``--against activemq`` run starts it (a
process of its own, with the ``activemq.xml`` written from the run's
configuration as the lab's ``activemq_config`` adapts it) and reads it over
STOMP (the statistics plugin) and over Jolokia (the MBeans) at once; both
readers must name the pathology in the pathology run and find nothing in the
cure run.

- Lab 06, ``old-message``: one message on /queue/audit nobody reads keeps
  every KahaDB journal file written since; the 1 MiB store fills and holds the
  shop. Its cure ``ack-compaction`` (KahaDB's compaction of the acks that keep
  the chain) lets the shop send its orders.
- Lab 07, ``activemq-defaults``: ActiveMQ dead-letters the NACKed poison order
  at once (its six redeliveries are its JMS client's; no loop on the broker)
  into ``ActiveMQ.DLQ``, where the quotes that expire on /queue/prices go too.
  Its cure ``individual-dlq``: the queue's own dead letter queue, expired
  messages dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from clients.doctor.live import LiveReport
from clients.labs.model import Lab
from tests.doctor_live_support import ActiveMQUrls, activemq_for, doctors_while_playing, lab_and_scenario

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("doctor-live-brokers")]  # one JVM or Erlang broker at a time

KAHADB_LAB, KAHADB = lab_and_scenario("06-journal-kept-alive")
POISON_LAB, POISON = lab_and_scenario("07-poison-message")

#: Lab 06's window: KahaDB's store fills 4 to 8 s into the run here, then the shortest finding (5 s).
KAHADB_WINDOW = 15.0
#: Lab 07's workload: the quotes expire after 2 s and are swept within a second; then 5 s and more.
POISON_SECONDS = 11.0


def _reports(
    lab: Lab,
    run: str,
    tmp_path: Path,
    play: Callable[[ActiveMQUrls], Coroutine[Any, Any, Any]],
    window: float,
) -> tuple[tuple[LiveReport, ...], Any]:
    spec = next(r for r in lab.runs if r.name == run)
    with activemq_for(lab.scenario().activemq_config(spec.config()), tmp_path) as amq:
        reports, played = doctors_while_playing([amq.stomp, amq.jolokia], lambda: play(amq), window, timeout=15)
    for report in reports:
        assert (report.broker, report.version) == ("activemq", "5.17.2"), report.target
    return reports, played


def _found(report: LiveReport, pathology: str, lab: str) -> Any:
    assert [f.pathology for f in report.findings] == [pathology], [f.headline for f in report.findings]
    finding = report.findings[0]
    assert finding.fix.lab == lab and finding.end - finding.start >= 5 and finding.series
    return finding


def _kahadb(run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple[LiveReport, ...], Any]:
    # The lab's workload ends once the shop has waited LIVE_STUCK: here it stays held for the window.
    monkeypatch.setattr(KAHADB, "LIVE_STUCK", KAHADB_WINDOW)
    monkeypatch.setattr(KAHADB, "LIVE_SECONDS", KAHADB_WINDOW + 1)

    def play(amq: ActiveMQUrls) -> Coroutine[Any, Any, Any]:
        kahadb = amq.broker.run_dir / "data" / "kahadb"
        return KAHADB.play_on(amq.port, "message", lambda: KAHADB.kahadb_files(kahadb))

    return _reports(KAHADB_LAB, run, tmp_path, play, KAHADB_WINDOW)


def test_kahadb_held_full_by_one_old_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stomp, jolokia), played = _kahadb("old-message", tmp_path, monkeypatch)
    assert played["receipted"] < KAHADB.LIVE_ORDERS and played["found"]["files"] >= 12  # the shop held
    for report in (stomp, jolokia):
        finding = _found(report, "store_held_by_few_live", "06-journal-kept-alive")
        assert finding.culprits == ("/queue/audit",)
        assert "offlineDurableSubscriberTimeout" in finding.fix.text  # activemq.xml's syntax
        assert all(values["store_pct"] >= 99 for _, values in finding.series)
    # Jolokia names KahaDB's journal files and the held send; the statistics plugin neither.
    held = jolokia.findings[0].series[-1][1]
    assert held["journal_files"] >= 12 and held["blocked_producers"] >= 1, held
    assert stomp.findings[0].series[-1][1]["journal_files"] is None


def test_kahadb_ack_compaction_nothing_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports, played = _kahadb("ack-compaction", tmp_path, monkeypatch)
    assert played["receipted"] >= KAHADB.LIVE_ORDERS  # the shop was never held
    for report in reports:
        assert report.findings == (), [f.headline for f in report.findings]


def _poison(run: str, tmp_path: Path) -> tuple[tuple[LiveReport, ...], Any]:
    return _reports(
        POISON_LAB, run, tmp_path, lambda amq: POISON.play_on(amq.port, POISON_SECONDS, None), POISON_SECONDS - 1
    )


def test_poison_message_dead_lettered_among_expired_quotes(tmp_path: Path) -> None:
    reports, played = _poison("activemq-defaults", tmp_path)
    dlq = played["dlqs"]["/queue/ActiveMQ.DLQ"]
    assert sum(m["body"] == "poison" for m in dlq) == 1 and len(dlq) == 1 + POISON.QUOTES
    for report in reports:
        finding = _found(report, "dead_letters_among_expired", "07-poison-message")
        assert (finding.subject, finding.culprits) == ("/queue/ActiveMQ.DLQ", ("/queue/prices",))
        assert finding.series[-1][1] == {
            "dead_letters": 1 + POISON.QUOTES,
            "expired_elsewhere": POISON.QUOTES,
            "failed_delivery": 1,
        }
        assert "<individualDeadLetterStrategy" in finding.fix.text  # activemq.xml's syntax


def test_poison_message_in_its_own_dead_letter_queue_nothing_found(tmp_path: Path) -> None:
    reports, played = _poison("individual-dlq", tmp_path)
    assert [m["body"] for m in played["dlqs"]["/queue/ActiveMQ.DLQ.Queue.orders"]] == ["poison"]
    for report in reports:
        assert report.findings == (), [f.headline for f in report.findings]
