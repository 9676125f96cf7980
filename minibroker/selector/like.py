"""``LIKE`` patterns, matched without a backtracking regular expression.

Theory of operation
-------------------
ActiveMQ (``ComparisonExpression.LikeExpression``) translates a pattern into
a Java regex: ``%`` becomes ``.*?``, ``_`` becomes ``.``, every other
character is literal (regex metacharacters are escaped), DOTALL, anchored at
both ends.  The escape character escapes only when the next character is
``_``, ``%`` or the escape character itself; anywhere else it is an ordinary
character.

A regex like ``.*a.*a.*a.*b`` can backtrack for a very long time on a
hostile header, and a selector is client input that runs inside the broker's
event loop.  So we split the pattern at its unescaped ``%`` signs into
fixed-length segments (literals and ``_``) and match greedily: the first
segment at the start, the last at the end, each middle one at its leftmost
occurrence after the previous.  Because segments have fixed lengths, the
leftmost placement never rules out a match, and the cost is at most
(length of value) x (length of pattern).  Segments without ``_`` use plain
string searches.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .nodes import Value

__all__ = ["LikePattern", "like_test"]


class _Segment:
    """A fixed-length run of literal characters and ``_`` wildcards."""

    __slots__ = ("length", "literal", "regex")

    def __init__(self, parts: list[str | None]) -> None:
        self.length = len(parts)
        if None in parts:
            self.literal = None
            body = "".join("." if p is None else re.escape(p) for p in parts)
            self.regex: re.Pattern[str] | None = re.compile(body, re.DOTALL)
        else:
            self.literal = "".join(parts)  # type: ignore[arg-type]
            self.regex = None

    def at(self, text: str, index: int) -> bool:
        if self.literal is not None:
            return text.startswith(self.literal, index)
        return self.regex.match(text, index) is not None  # type: ignore[union-attr]

    def find(self, text: str, start: int, end: int) -> int:
        if self.literal is not None:
            return text.find(self.literal, start, end)
        m = self.regex.search(text, start, end)  # type: ignore[union-attr]
        return -1 if m is None else m.start()


class LikePattern:
    """A compiled LIKE pattern with ActiveMQ's escape rules."""

    def __init__(self, pattern: str, escape: str | None = None) -> None:
        segments: list[list[str | None]] = [[]]
        i = 0
        while i < len(pattern):
            c = pattern[i]
            if c == escape and i + 1 < len(pattern) and pattern[i + 1] in ("_", "%", escape):
                segments[-1].append(pattern[i + 1])
                i += 2
                continue
            if c == "%":
                segments.append([])
            else:
                segments[-1].append(None if c == "_" else c)
            i += 1
        self._segments = [_Segment(parts) for parts in segments]

    def matches(self, text: str) -> bool:
        """True when the whole of ``text`` matches the pattern."""
        segments = self._segments
        first = segments[0]
        if len(segments) == 1:
            return len(text) == first.length and first.at(text, 0)
        last = segments[-1]
        end = len(text) - last.length
        if end < first.length or not first.at(text, 0) or not last.at(text, end):
            return False
        pos = first.length
        for segment in segments[1:-1]:
            found = segment.find(text, pos, end)
            if found < 0:
                return False
            pos = found + segment.length
        return True


def like_test(pattern: str, escape: str | None, negated: bool) -> Callable[[Value], Value]:
    """``v [NOT] LIKE pattern``: NULL for NULL, FALSE (TRUE if negated) for a non-string."""
    compiled = LikePattern(pattern, escape)

    def test(v: Value) -> Value:
        if v is None:
            return None
        if type(v) is not str:
            return negated
        return compiled.matches(v) != negated

    return test
