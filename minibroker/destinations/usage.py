"""The usage tree: ActiveMQ's ``SystemUsage`` / ``MemoryUsage``, sans-IO.

Theory of operation
-------------------
A ``Usage`` counts bytes against a limit. Usages form a tree: the broker's
memory usage is the root and every destination has a child whose limit is the
broker's unless a policy sets ``memory_limit``. Every increase or decrease of a
child is applied to its parent too, so the broker-wide figure is always the
sum of what destinations hold (ActiveMQ ``Usage.increaseUsage``).

``percent`` is floor(usage x 100 / limit), as ActiveMQ computes it.
``is_full()`` is own usage at or over 100% *or the parent full*. The two
cursor space checks (``has_space``) are the heart of the starving
consumers:

- ``legacy`` (ActiveMQ up to 5.14): ``not usage.is_full(hwm)``, where
  ``is_full(hwm)`` is true when this usage *or any ancestor* is at or over the
  high-water mark. One destination filling the shared broker memory to 70%
  stops every other destination's cursor, even one holding nothing.
- ``current`` (5.15 and later, AMQ-4467/AMQ-6687): the parent is not 100%
  full and this usage is below the high-water mark.

Listeners are called when a usage's percent changes (the trace's ``usage``
events, the diagnosis, the file cursor's swap trigger) and whenever it drops
(waiters for space: parked producers retry then).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Usage", "SPACE_CHECKS"]

#: Names of the cursor space-check policies.
SPACE_CHECKS = ("current", "legacy")

Listener = Callable[["Usage", int, int], None]


class Usage:
    """Bytes used against a limit, with a parent that sees every change."""

    __slots__ = ("name", "limit", "usage", "parent", "_percent", "_listeners", "peak", "_low", "_high")

    def __init__(self, name: str, limit: int, parent: Usage | None = None) -> None:
        self.name = name
        self.limit = limit
        self.usage = 0
        self.parent = parent
        self.peak = 0
        self._percent = 0
        self._listeners: list[Listener] = []
        # The usage band within which the percent does not change: [_low, _high).
        # Charging and releasing only compare against it (the hot path); the
        # percent is recomputed only when the usage leaves the band.
        self._low = 0
        self._high = self._band_top(0)

    def _band_top(self, percent: int) -> int:
        if self.limit <= 0:
            return 1 << 62
        return -(-(percent + 1) * self.limit // 100)  # the least usage with a higher percent

    # -- accounting
    def increase(self, amount: int) -> None:
        """Charge ``amount`` bytes here and to every ancestor."""
        u: Usage | None = self
        while u is not None:
            used = u.usage + amount
            u.usage = used
            if used > u.peak:
                u.peak = used
            if used >= u._high:
                u._changed()
            u = u.parent

    def decrease(self, amount: int) -> None:
        """Release ``amount`` bytes here and from every ancestor."""
        u: Usage | None = self
        while u is not None:
            used = u.usage - amount
            u.usage = used
            if used < u._low:
                u._changed()
            u = u.parent

    def passes(self, amount: int) -> bool:
        """Charge ``amount`` bytes and release them again at once, if that changes nothing
        but the peaks: True, with every peak raised as the charge would raise it, when no
        usage of the chain would leave its band (no percent changes, no listener is
        called, and the release brings each back to where it was); False, with nothing
        changed, otherwise (the caller then charges and releases as usual).

        Theory of operation: ``increase`` calls ``_changed`` only when a usage reaches
        ``_high``, and ``decrease`` only when one falls below ``_low``, which is at most
        the usage before the charge. So a charge that stays under every ``_high`` and is
        released at once leaves usages, bands and percents as they were: only ``peak``
        remembers it. A message that goes straight to a consumer that acknowledges it
        on delivery (auto ack) is such a charge."""
        u: Usage | None = self
        while u is not None:
            if u.usage + amount >= u._high:
                return False
            u = u.parent
        u = self
        while u is not None:
            if u.usage + amount > u.peak:
                u.peak = u.usage + amount
            u = u.parent
        return True

    def _changed(self) -> None:
        old = self._percent
        new = self.percent
        self._low = -(-new * self.limit // 100) if self.limit > 0 else 0
        self._high = self._band_top(new)
        if new != old:
            self._percent = new
            for listener in self._listeners:
                listener(self, old, new)

    # -- questions
    @property
    def percent(self) -> int:
        """floor(usage * 100 / limit); 0 when there is no limit."""
        if self.limit <= 0:
            return 0
        return self.usage * 100 // self.limit

    def is_full(self, mark: int = 100) -> bool:
        """At or over ``mark`` percent here, or in any ancestor (ActiveMQ ``isFull``)."""
        u: Usage | None = self
        while u is not None:
            # ``_percent`` is ``percent``: it is recomputed whenever the usage leaves its band.
            if u._percent >= mark and u.limit > 0:
                return True
            u = u.parent
        return False

    def has_space(self, high_water_mark: int, check: str = "current") -> bool:
        """May a cursor cache one more message? (see the module docstring)"""
        if check == "legacy":
            return not self.is_full(high_water_mark)
        # Inline (per message): no ancestor at 100%, and the percent here under the mark
        # (``_percent`` is ``percent``, 0 without a limit).
        u = self.parent
        while u is not None:
            if u._percent >= 100 and u.limit > 0:
                return False
            u = u.parent
        return self._percent < high_water_mark

    def fits(self, amount: int) -> bool:
        """Would ``amount`` more bytes keep this usage and its ancestors within their limits?"""
        u: Usage | None = self
        while u is not None:
            if u.limit > 0 and u.usage + amount > u.limit:
                return False
            u = u.parent
        return True

    # -- listeners
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(usage, old_percent, new_percent)`` on every percent change."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def __repr__(self) -> str:
        return f"<Usage {self.name} {self.usage}/{self.limit} ({self.percent}%)>"
