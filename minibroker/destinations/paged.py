"""A store-only message as a queue's cursor pages it in.

- ``PagedRef``: one message that is only in the store (the journal, or the temp
  store for a spilled non-persistent one), made on demand by the cursor's
  ``StoreIndex``.
- ``StoreRun``: several such messages of one priority, next in dispatch order,
  all in the queue's journal: read together.

The store hooks read them back (``ports.DestinationStore``); they live here, not
in ``cursor.py``, so that ``ports.py`` can name them without importing the cursor.
"""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple

__all__ = ["PagedRef", "StoreRun"]


class PagedRef(NamedTuple):
    """A store-only message: where it is and what dispatch order needs.

    Made on demand by ``StoreIndex`` (which keeps none of these). ``priority``
    is the message's in a prioritized queue, and 4 in a FIFO one, whose order
    ignores it.
    """

    ref: Any  # a persistence.StoreRef, or (an int) a temp store entry's seq (a spilled non-persistent message)
    seq: int
    priority: int
    redelivered: bool
    expires: int


class StoreRun(NamedTuple):
    """Store-only messages of one priority, next in dispatch order, all in the
    queue's journal under its key (``StoreIndex.first_runs``)."""

    journal: Any
    key: str
    priority: int
    seqs: array[int]  # broker seqs
    journal_seqs: array[int]
