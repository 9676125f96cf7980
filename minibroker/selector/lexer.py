"""Tokens of the selector language, as ActiveMQ's JavaCC grammar defines them.

Theory of operation
-------------------
ActiveMQ's ``SelectorParser.jj`` (activemq-client/src/main/grammar/) is a
JavaCC grammar, and JavaCC's tokenizer takes the *longest* match among all
token rules at each position, a keyword winning a tie with an identifier.
One regular expression with its alternatives in the right order gives the
same answer here:

- numbers: a float (``1.``, ``.5``, ``1.5e3``, ``5E10``) is tried before the
  integer forms, so ``1e5`` is one float and not ``1`` followed by ``e5``;
  then hexadecimal ``0x1F``, decimal ``123`` (optional ``L``/``l`` suffix,
  no leading zero) and octal ``0``/``017``.  ``08`` is therefore the octal
  ``0`` followed by the decimal ``8`` (a parse error, as in ActiveMQ);
- identifiers are ASCII only: ``[A-Za-z_$][A-Za-z0-9_$]*``.  A STOMP header
  such as ``content-type`` or ``activemq.foo`` cannot be named in a selector
  (``content-type`` reads as ``content - type``), exactly as in ActiveMQ
  Classic, whose grammar has no quoted identifiers;
- keywords (``AND OR NOT BETWEEN LIKE ESCAPE IN IS TRUE FALSE NULL`` and
  ActiveMQ's ``XPATH XQUERY``) are case-insensitive; identifiers are not;
- strings are single-quoted, ``''`` standing for one quote;
- comments: ``/* ... */`` and ``-- ...`` up to a line end.  A ``--`` comment
  with no line end after it is not a comment in the grammar: it lexes as two
  minus signs, so ``a = 1 -- note`` means ``a = 1 - (-note)``.  We keep that
  behaviour and record a warning.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import SelectorError

__all__ = ["KEYWORDS", "Token", "tokenize"]

KEYWORDS = frozenset(
    ["NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL", "XPATH", "XQUERY"]
)

_EXPONENT = r"[eE][+-]?[0-9]+"
_MASTER = re.compile(
    "|".join(
        [
            r"(?P<ws>[ \t\n\r\f]+)",
            r"(?P<comment>--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)",
            rf"(?P<float>[0-9]+\.[0-9]*(?:{_EXPONENT})?|\.[0-9]+(?:{_EXPONENT})?|[0-9]+{_EXPONENT})",
            r"(?P<hex>0[xX][0-9a-fA-F]+)",
            r"(?P<dec>[1-9][0-9]*[lL]?)",
            r"(?P<oct>0[0-7]*)",
            r"(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)",
            r"(?P<str>'(?:[^']|'')*')",
            r"(?P<op><>|<=|>=|[=<>+\-*/%(),])",
        ]
    )
)

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class Token(NamedTuple):
    """One token: ``kind`` is ID, KW, STR, INT, FLOAT, OP or EOF.

    ``value`` is the decoded literal (int, float or str), the upper-cased
    keyword for KW, the name for ID and the symbol for OP.
    """

    kind: str
    value: object
    pos: int
    text: str


def tokenize(text: str) -> tuple[list[Token], list[str]]:
    """Split ``text`` into tokens ending with an EOF token, plus warnings.

    Raises:
        SelectorError: on a character no token can start with, an
            unterminated string, or an integer that does not fit in 64 bits.
    """
    tokens: list[Token] = []
    warnings: list[str] = []
    pos, end = 0, len(text)
    while pos < end:
        m = _MASTER.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch == "'":
                raise SelectorError("unterminated string literal", pos, text)
            raise SelectorError(f"unexpected character {ch!r}", pos, text)
        kind = m.lastgroup
        raw = m.group()
        if raw == "-" and text.startswith("--", pos) and not _second_dash(tokens, pos):
            warnings.append(
                f"'--' at position {pos} is not a comment because no line end follows it;"
                " it reads as two minus signs, as in ActiveMQ"
            )
        if kind not in ("ws", "comment"):
            tokens.append(_token(kind or "", raw, pos, text))
        pos = m.end()
    tokens.append(Token("EOF", None, end, ""))
    return tokens, warnings


def _second_dash(tokens: list[Token], pos: int) -> bool:
    """True when the '-' at ``pos`` is the second of a pair already warned about."""
    return bool(tokens) and tokens[-1].text == "-" and tokens[-1].pos == pos - 1


def _token(kind: str, raw: str, pos: int, text: str) -> Token:
    if kind == "id":
        upper = raw.upper()
        if upper in KEYWORDS:
            return Token("KW", upper, pos, raw)
        return Token("ID", raw, pos, raw)
    if kind == "str":
        return Token("STR", raw[1:-1].replace("''", "'"), pos, raw)
    if kind == "op":
        return Token("OP", raw, pos, raw)
    if kind == "float":
        return Token("FLOAT", float(raw), pos, raw)
    return Token("INT", _integer(kind, raw, pos, text), pos, raw)


def _integer(kind: str, raw: str, pos: int, text: str) -> int | float:
    """Decode an exact numeric literal the way ActiveMQ's ConstantExpression does.

    Hexadecimal and octal literals must fit in a Java long (an error
    otherwise).  A decimal literal too big for a long becomes a BigDecimal
    in ActiveMQ; we approximate it with a float.
    """
    if kind == "dec":
        value = int(raw.rstrip("lL"))
        return value if value <= _LONG_MAX else float(value)
    value = int(raw[2:], 16) if kind == "hex" else int(raw, 8)
    if value > _LONG_MAX:
        raise SelectorError(f"number {raw} does not fit in 64 bits", pos, text)
    return value
