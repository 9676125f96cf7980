"""What the ``ring`` layout costs the store: every ring reserved whole, from its first message.

The ring layout (Qpid's legacystore) creates a destination's ``file_count``
files of ``file_size`` bytes at once, and the store counts them at that size
(as Qpid does: the journal is preallocated), however little was written in
them: 854 queues of the default 8 x 1.5 MiB ring reserve 10 GiB, the default
store limit, and then every persistent producer blocks while the rings hold a
few megabytes of messages. These words say so wherever the store's fullness is
reported: the ERROR or log line of a blocked producer, ``stat``'s diagnosis.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RingReservation", "size_text"]


def size_text(n: int) -> str:
    """``12582912`` -> ``"12 MiB"``; one decimal when the unit does not divide it."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if n % scale == 0 else f"{value:.1f} {unit}"
    return f"{n} bytes"


class RingReservation(NamedTuple):
    """The rings of a store of the ring layout: how many, and what each reserves."""

    rings: int
    each: int

    @property
    def reserved(self) -> int:
        return self.rings * self.each

    def explain(self) -> str:
        """One sentence on where the store's usage comes from."""
        return (
            f"The ring layout reserves each destination's whole ring when it is created (Qpid preallocates it): "
            f"{self.rings} ring{'s' if self.rings != 1 else ''} of {size_text(self.each)} reserve "
            f"{size_text(self.reserved)} of the store limit, however little they hold."
        )

    def cure(self, limit: int) -> str:
        """What an operator can do about a store filled by reservations."""
        fits = limit // self.each if self.each else 0
        return (
            f"each persistent destination costs one ring of {size_text(self.each)}: the store limit "
            f"{size_text(limit)} holds {fits}; raise store_limit, make the rings smaller ([store] file_count, "
            f'file_size), or use layout = "growing" (one journal shared by every destination)'
        )
