"""The read side's flow credit: how many messages a connection holds for ``get``.

Theory of operation
-------------------
- A message buffered in a subscription (no ``get`` was waiting for it) takes
  one unit of credit; taking it with ``get`` gives the unit back; a ``get``
  cancelled after it was handed its message buffers it again and takes the
  unit again.
- At ``limit`` units held the connection stops reading the socket; it reads
  again once at most half are held (a slow application fills the TCP window,
  and the broker sees a slow consumer).
- When the connection must read whatever is held (a RECEIPT awaited, the
  connection closing) it does not pause and resumes at once: the credit
  answers ``wants_pause(must_read)``, the connection moves the socket.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FlowCredit"]


class FlowCredit:
    """Messages held across one connection's subscriptions, against ``limit``.

    ``on_change`` is called when reading may have to pause or resume (the
    connection then asks ``wants_pause`` and moves its socket).
    """

    def __init__(self, limit: int, on_change: Callable[[], None]) -> None:
        #: Messages held before reading pauses.
        self.limit = limit
        #: Messages buffered and not yet taken.
        self.held = 0
        #: True while the connection has stopped reading because of the credit.
        self.paused = False
        self._on_change = on_change

    @property
    def exhausted(self) -> bool:
        """True when ``limit`` messages or more are held."""
        return self.held >= self.limit

    def take(self) -> None:
        """A message was buffered."""
        self.held += 1
        if self.held >= self.limit and not self.paused:
            self._on_change()

    def give_back(self) -> None:
        """A buffered message was taken."""
        self.held -= 1
        if self.paused:
            self._on_change()

    def retake(self) -> None:
        """A message taken by a cancelled ``get`` went back into its buffer."""
        self.held += 1

    def wants_pause(self, must_read: bool) -> bool:
        """Whether reading should be paused now: at ``limit``, until at most half is held."""
        if self.paused:
            return not (must_read or self.held <= self.limit // 2)
        return self.held >= self.limit and not must_read
