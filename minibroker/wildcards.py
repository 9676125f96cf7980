"""ActiveMQ destination wildcards: ``.`` separates, ``*`` matches one element,
``>`` (last) matches the rest, zero or more elements.

``PRICE.>`` matches ``PRICE``, ``PRICE.STOCK`` and ``PRICE.STOCK.NYSE.IBM``
(ActiveMQ's ``PrefixDestinationFilter`` accepts a path as long as the prefix
without its ``>``); ``PRICE.*.IBM`` matches ``PRICE.STOCK.IBM`` only; ``>``
alone matches every destination.
"""

from __future__ import annotations

__all__ = ["matches", "specificity", "is_wildcard"]


def is_wildcard(pattern: str) -> bool:
    """True when ``pattern`` contains ``*`` or ``>`` elements."""
    return any(part in ("*", ">") for part in pattern.split("."))


def matches(pattern: str, name: str) -> bool:
    """Does the ActiveMQ wildcard ``pattern`` match destination ``name``?"""
    want = pattern.split(".")
    have = name.split(".")
    for i, part in enumerate(want):
        if part == ">":
            return i == len(want) - 1 and len(have) >= i
        if i >= len(have):
            return False
        if part != "*" and part != have[i]:
            return False
    return len(want) == len(have)


def specificity(pattern: str) -> tuple[int, int, int]:
    """A sort key: larger is more specific (exact beats ``*`` beats ``>``)."""
    parts = pattern.split(".")
    literal = sum(1 for p in parts if p not in ("*", ">"))
    has_rest = 1 if parts and parts[-1] == ">" else 0
    return (literal, -has_rest, len(parts))
