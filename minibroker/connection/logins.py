"""Failed logins per address, and how long their next refusal waits.

Theory of operation
-------------------
A password guesser connects, tries, is refused, and tries again. Checking a
password is slow on purpose (PBKDF2, in a thread off the event loop), so the
guesser's speed is set by how soon it hears "no". After
``failures_before_delay`` failed logins from one address, each further
refusal is withheld for ``delay`` seconds, doubling with every failure up to
``MAX_DELAY``; the connection stays open but unread meanwhile. A successful
login from the address clears its count, and an address silent for
``FORGET_AFTER`` seconds is forgotten, so the table stays small.

The address is the peer's host without its port: a guesser opening new
connections gets a new port each time. This is pure bookkeeping on times the
caller gives: the broker core owns the clock and the timers.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["LoginFailures", "host_of", "MAX_DELAY"]

#: The longest a refusal is withheld, in seconds.
MAX_DELAY = 30.0
#: An address with no failure for this long starts afresh, in seconds.
FORGET_AFTER = 15 * 60.0
#: Addresses remembered at most (the oldest are forgotten first).
MAX_ADDRESSES = 10_000


def host_of(peer: str) -> str:
    """``"127.0.0.1:5123"`` -> ``"127.0.0.1"``; ``"[::1]:5123"`` and ``"::1:5123"`` -> ``"::1"``."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host.strip("[]")


class LoginFailures:
    """Counts of failed logins by address, oldest first."""

    def __init__(self, failures_before_delay: int, delay: float) -> None:
        self.failures_before_delay = failures_before_delay
        self.delay = delay
        # address -> (failures, time of the last one)
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def failed(self, address: str, now: float) -> float:
        """A login from ``address`` failed at ``now``: seconds to withhold its refusal."""
        count, last = self._failures.pop(address, (0, now))
        if now - last > FORGET_AFTER:
            count = 0
        count += 1
        self._failures[address] = (count, now)
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)
        excess = count - self.failures_before_delay - 1
        if excess < 0 or self.delay <= 0:
            return 0.0
        return min(MAX_DELAY, self.delay * 2.0 ** min(excess, 32))

    def succeeded(self, address: str) -> None:
        """A login from ``address`` succeeded: its count starts afresh."""
        self._failures.pop(address, None)

    def count(self, address: str) -> int:
        """Failed logins remembered for ``address``."""
        return self._failures.get(address, (0, 0.0))[0]
