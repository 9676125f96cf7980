"""The per-delivery checks the model-based tests share (queue and topic models)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from minibroker.destinations import seqfifo
from minibroker.frames import Frame
from storage import entries


class IndexOnDisk:
    """A model's mix-in: the broker's index mostly on disk. The journal's table comes
    in blocks of 4 rows with one block meant to stay in memory (with
    ``index_cache_rows = 1`` in the config), the cursors' FIFOs in chunks of 3 pairs
    (``storage/entries.py``, ``minibroker/destinations/seqfifo.py``), so a few dozen messages
    spill and read back blocks and chunks all the time."""

    def __init__(self) -> None:
        self.patches = [
            mock.patch.object(entries, "BLOCK_ROWS", 4),
            mock.patch.object(entries, "_SPLIT_ROWS", 8),
            mock.patch.object(entries, "_MIN_CACHE_BLOCKS", 1),
            mock.patch.object(seqfifo, "CHUNK", 3),
        ]
        for patch in self.patches:
            patch.start()
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()  # type: ignore[misc]
        finally:
            for patch in self.patches:
                patch.stop()


def with_index_on_disk(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a document for ``parse_config``) with ``index_cache_rows = 1``."""
    return {**config, "store": {**config.get("store", {}), "index_cache_rows": 1}}


def check_delivery(
    who: str, message: Frame, given: set[bytes], order: dict[bytes, tuple[str, int]], last_first: dict[str, int]
) -> None:
    """Check one MESSAGE and record it.

    ``redelivered:true`` must be set exactly when ``message`` is in ``given``
    (delivered before), and a first delivery must come after the last first
    delivery ``who`` had from the same producer (``order``: body -> (producer,
    place in that producer's order); ``last_first``: producer -> place).
    """
    body = message.body
    again = body in given
    assert (message.headers.get("redelivered") == "true") == again, (
        f"{who} {body!r}: redelivered header {message.headers.get('redelivered')!r}, delivered before: {again}"
    )
    if not again:
        producer, index = order[body]
        last = last_first.get(producer, -1)
        assert index > last, f"{who}: {body!r} came after {producer}'s {last}th: out of the order it was sent in"
        last_first[producer] = index
    given.add(body)
