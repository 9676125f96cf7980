"""The one error a selector can raise, and how its message is written.

A malformed selector is the client's fault: the broker puts
``str(SelectorError)`` into the ``message`` header of a STOMP ERROR frame, so
the message is a single line (the selector text is quoted with its control
characters escaped) and says where the fault is and what was expected.
Long selectors are shown as a window around the fault.
"""

from __future__ import annotations

__all__ = ["SelectorError"]

# How many characters of the selector to show on each side of the fault.
_WINDOW = 40


class SelectorError(ValueError):
    """A selector that cannot be compiled.

    The message reads ``selector: <reason> at position <n> in "<text>"``,
    followed by ``; expected <what>`` when the parser knows what it wanted.

    Attributes:
        position: 0-based character offset of the fault in ``text``.
        reason: what is wrong (e.g. "unexpected ')'").
        expected: what would have been valid there, or None.
        text: the selector as given.
    """

    def __init__(self, reason: str, position: int, text: str, expected: str | None = None) -> None:
        self.reason = reason
        self.position = position
        self.text = text
        self.expected = expected
        message = f"selector: {_escape(reason, quote=False)} at position {position}"
        message += f" in {_excerpt(text, position)}"
        if expected:
            message += f"; expected {_escape(expected, quote=False)}"
        super().__init__(message)


def _escape(fragment: str, quote: bool = True) -> str:
    """One-line rendering of part of a selector; quote-safe if ``quote``."""
    out = []
    for ch in fragment:
        if ch == "\\" and quote:
            out.append("\\\\")
        elif ch == '"' and quote:
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _excerpt(text: str, position: int) -> str:
    """The selector in double quotes, cut to a window around ``position``."""
    start = max(0, position - _WINDOW)
    end = min(len(text), position + _WINDOW)
    head = "..." if start > 0 else ""
    tail = "..." if end < len(text) else ""
    return f'"{head}{_escape(text[start:end])}{tail}"'
