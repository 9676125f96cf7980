"""``doctor --live`` on the real server while lab 07's live workload runs: the poison message, and its cure.

Lab 07's workload (``play_on``): an order service on /queue/orders NACKs one
message, ``poison``, each time it comes and ACKs the good orders around it;
quotes expire unread on /queue/prices. With no delivery limit
(``requeue-forever``) the poison message comes back at once, for ever, and the
doctor must name the loop on /queue/orders; with the cure (``back-off``: six
redeliveries spread by a delay with back-off, cut to a tenth as the lab's live
run cuts them, then the queue's own dead letter queue) it finds nothing.
With ActiveMQ's defaults (``activemq-defaults``: six redeliveries, then the
shared ``ActiveMQ.DLQ``, where expired messages go too) the doctor must name
the poison message hidden there among the expired quotes.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest

from clients.doctor.live import LiveReport
from clients.labs.model import labs_directory, load_lab
from tests.broker_support import RunningBroker
from tests.doctor_live_support import doctor_during_run

pytestmark = pytest.mark.slow

LAB = load_lab(labs_directory() / "07-poison-message")
SCENARIO = LAB.scenario()

#: The workload's length: the doctor's window (one more than the shortest finding, 5 s) and a second to spare.
SECONDS = 7.0
#: ... and where the quotes must first expire (after 2 s, swept within a second): 5 s and more after that.
DEAD_LETTER_SECONDS = 10.0


def _doctor_during_workload(run: str, seconds: float = SECONDS) -> tuple[LiveReport, dict[str, Any]]:
    def play(broker: RunningBroker) -> Coroutine[Any, Any, dict[str, Any]]:
        def depth() -> int:
            return int(broker.call(lambda: broker.server.broker.destinations[SCENARIO.ORDERS].size()))

        return SCENARIO.play_on(broker.port, seconds, depth)

    return doctor_during_run(LAB, run, play, seconds - 1, adapt=SCENARIO.live_config)


def test_poison_message_in_a_loop_found_among_acknowledged_orders() -> None:
    report, played = _doctor_during_workload("requeue-forever")
    assert [(f.pathology, f.subject) for f in report.findings] == [("redelivery_loop", "/queue/orders")]
    finding = report.findings[0]
    assert finding.fix.lab == "07-poison-message" and "maximum_redeliveries" in finding.fix.text
    assert finding.end - finding.start >= 5
    assert all(values["redelivered"] > 0 for _, values in finding.series)
    assert played["service"].handled > 0  # good orders were acknowledged while it looped


def test_back_off_and_dead_letter_cure_nothing_found() -> None:
    report, played = _doctor_during_workload("back-off")
    assert report.findings == (), [f.headline for f in report.findings]
    assert any(m["body"] == "poison" for m in played["dlqs"].get("/queue/ActiveMQ.DLQ.Queue.orders", []))


def test_poison_message_dead_lettered_among_expired_quotes() -> None:
    report, played = _doctor_during_workload("activemq-defaults", DEAD_LETTER_SECONDS)
    assert [(f.pathology, f.subject) for f in report.findings] == [
        ("dead_letters_among_expired", "/queue/ActiveMQ.DLQ")
    ]
    finding = report.findings[0]
    assert finding.culprits == ("/queue/prices",) and finding.fix.lab == "07-poison-message"
    assert 'dead_letter_strategy = "individual"' in finding.fix.text and "process_expired = false" in finding.fix.text
    assert finding.series[-1][1]["failed_delivery"] == 1 and finding.end - finding.start >= 5
    assert any(m["body"] == "poison" for m in played["dlqs"]["/queue/ActiveMQ.DLQ"])
