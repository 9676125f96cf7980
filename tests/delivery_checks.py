"""The per-delivery checks the model-based tests share (queue and topic models)."""
from __future__ import annotations

from minibroker.frames import Frame


def check_delivery(who: str, message: Frame, given: set[bytes], order: dict[bytes, tuple[str, int]],
                   last_first: dict[str, int]) -> None:
    """Check one MESSAGE and record it.

    ``redelivered:true`` must be set exactly when ``message`` is in ``given``
    (delivered before), and a first delivery must come after the last first
    delivery ``who`` had from the same producer (``order``: body -> (producer,
    place in that producer's order); ``last_first``: producer -> place).
    """
    body = message.body
    again = body in given
    assert (message.headers.get("redelivered") == "true") == again, (
        f"{who} {body!r}: redelivered header {message.headers.get('redelivered')!r}, delivered before: {again}")
    if not again:
        producer, index = order[body]
        last = last_first.get(producer, -1)
        assert index > last, f"{who}: {body!r} came after {producer}'s {last}th: out of the order it was sent in"
        last_first[producer] = index
    given.add(body)
