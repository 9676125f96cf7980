"""``doctor --live`` sampling a broker while a lab's live workload plays on it (in a thread)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine

from clients.doctor.live import LiveReport, parse_target, run_live


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
