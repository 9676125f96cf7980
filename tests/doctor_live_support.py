"""``doctor --live`` sampling the real server while a lab's live workload plays on it (in a thread)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine

from clients.doctor.live import LiveReport, parse_target, run_live
from minibroker.config import BrokerConfig
from tests.broker_support import RunningBroker


def doctor_while_playing(
    port: int, play: Callable[[], Coroutine[Any, Any, Any]], window: float
) -> tuple[LiveReport, Any]:
    """The doctor's report over ``window`` seconds of the broker on ``port`` while ``play()``
    runs in a thread of its own, and what ``play()`` returned (its failure raised here)."""
    played: list[Any] = []
    failure: list[BaseException] = []

    def workload() -> None:
        try:
            played.append(asyncio.run(play()))
        except BaseException as exc:  # raised by the caller
            failure.append(exc)

    thread = threading.Thread(target=workload, daemon=True)
    thread.start()
    try:
        report = asyncio.run(run_live(parse_target(f"stomp://127.0.0.1:{port}"), window=window))
    finally:
        thread.join(60)
    assert not thread.is_alive(), "the workload did not end"
    if failure:
        raise failure[0]
    return report, played[0]


def doctor_during_run(
    lab: Any,
    run: str,
    play: Callable[[RunningBroker], Coroutine[Any, Any, Any]],
    window: float,
    adapt: Callable[[BrokerConfig], BrokerConfig] = lambda config: config,
) -> tuple[LiveReport, Any]:
    """``doctor_while_playing`` on the real server started with ``lab``'s ``run``'s configuration
    (``adapt`` ed, as a lab's live run adapts it), stopped after; ``play`` is given the server."""
    spec = next(r for r in lab.runs if r.name == run)
    broker = RunningBroker(adapt(spec.config())).start()
    try:
        return doctor_while_playing(broker.port, lambda: play(broker), window)
    finally:
        broker.stop()
