"""The one parser for numbers a client or a configuration writes as text.

``int()`` is far too lenient for a wire protocol: it takes digits of every
script (``int("²")`` fails but ``"²".isdigit()`` is true; ``int("٣")`` is 3),
spaces, underscores and a plus sign, and it refuses a string of more than
4,300 digits with an error nobody expects (``content-length`` written with
5,000 zeros). STOMP numbers are ASCII digits, so every header, ack id and
configuration value that holds one goes through ``parse_decimal``: ASCII
``0``-``9`` only (and one leading ``-`` where a sign is allowed), leading
zeros allowed, at most ``MAX_DIGITS`` significant digits; anything else is a
``ValueError`` whose text says what was wrong, for the caller's ERROR frame
or configuration error.
"""

from __future__ import annotations

__all__ = ["MAX_DIGITS", "parse_decimal"]

#: More significant digits than any value the broker keeps (an int64 has 19).
MAX_DIGITS = 30


def parse_decimal(text: str, *, signed: bool = False) -> int:
    """``text`` as an integer written in ASCII digits; ``ValueError`` saying why not.

    ``signed`` allows one leading ``-``. Leading zeros are fine (``0005`` is 5,
    5,000 zeros are 0); more than ``MAX_DIGITS`` significant digits are refused
    as too large, whatever bounds the caller checks next.
    """
    if text.isdigit() and text.isascii() and len(text) <= MAX_DIGITS:
        return int(text)  # the common case, a few plain digits, in one step
    digits = text[1:] if signed and text.startswith("-") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        kind = "an integer" if signed else "a non-negative integer"
        raise ValueError(f"not {kind} in ASCII digits (0-9)")
    significant = digits.lstrip("0") or "0"
    if len(significant) > MAX_DIGITS:
        raise ValueError(f"a number of {len(significant)} digits, too large")
    value = int(significant)
    return -value if digits is not text else value
