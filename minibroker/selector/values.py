"""Run-time semantics: SQL three-valued logic over ActiveMQ's value types.

Theory of operation
-------------------
A value is NULL (``None``), a boolean, an exact number (``int``), an
approximate number (``float``) or a string.  STOMP header values are
strings; numbers come from literals, arithmetic and JMS headers such as
JMSPriority.  The rules follow activemq-client/src/main/java/org/apache/
activemq/filter/ (ComparisonExpression, ArithmeticExpression,
UnaryExpression, LogicExpression) with ``convertStringExpressions`` on, as
ActiveMQ's STOMP connector sets it (it prefixes every STOMP selector with
``convert_string_expressions:`` in ProtocolConverter.onStompSubscribe):

- Comparisons (``compare``): a string compared with a number is converted
  to the *number's* kind: ``Long.valueOf`` rules for an exact number
  (``[+-]digits``, 64-bit) and ``Double.valueOf`` rules for an approximate
  one (``3``, ``2.5``, ``1e3``, ``NaN``, ``Infinity``, surrounding blanks).
  So ``weight > 2.5`` matches ``weight:3``, and ``weight > 2`` does *not*
  match ``weight:2.5`` (it is not an integer).  A string that does not
  convert makes the comparison FALSE, not NULL (ActiveMQ catches the
  NumberFormatException and answers FALSE); so ``weight <> 3`` is TRUE for
  ``weight:heavy``.  A string compared with TRUE/FALSE is converted with
  ``Boolean.valueOf`` ('true' in any case is TRUE, anything else FALSE).
  Other mixed kinds (boolean against number) compare FALSE.  Two strings
  order lexicographically; floats order as ``Double.compare`` does (NaN
  above everything and equal to itself, -0.0 below 0.0).
- NULL: any comparison, arithmetic, LIKE or IN with a NULL operand is NULL
  (unknown).  ActiveMQ returns FALSE instead of NULL when only the *right*
  side of ``=`` is NULL, and TRUE for ``a = b`` with both missing; we follow
  the JMS specification (NULL) there.
- Faults: where ActiveMQ's evaluation throws (``-``, ``*``, ``/``, ``%`` on a
  string; ``+`` with a number on the left and a non-number on the right;
  TRUE/FALSE on the left of a comparison with a string, a ClassCastException
  in ComparisonExpression.compare), the whole selector does not match that
  message.  Helpers raise ``Fault`` and the compiled selector catches it.
- ``+`` with a string on the left concatenates (``name + '!' = 'James!'``),
  printing numbers as Java does.  ``-`` applied to a non-number is NULL.
- Arithmetic: int op int stays int (wrapping at 64 bits, Java's long; Java's
  32-bit int overflow is not reproduced); ``/`` and ``%`` always give floats,
  with Java's results for division by zero (Infinity, NaN).
- An identifier used as a condition (``urgent``) is TRUE only for a boolean
  value: a STOMP header ``urgent:true`` is a *string*, so ``urgent`` alone is
  FALSE in ActiveMQ; write ``urgent = TRUE``.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from decimal import Decimal

from ..digits import parse_decimal
from .nodes import Value

__all__ = [
    "BAD",
    "BINARY",
    "Fault",
    "add",
    "and_v",
    "boolcast",
    "compare",
    "constant_comparison",
    "div",
    "eq",
    "ge",
    "gt",
    "in_test",
    "java_string",
    "le",
    "lt",
    "mod",
    "mul",
    "ne",
    "neg",
    "not3",
    "or_v",
    "parse_double",
    "parse_long",
    "sub",
]


class Fault(Exception):
    """ActiveMQ's evaluation would throw here: the message does not match."""


BAD = object()  # a string that does not convert to the wanted kind

_LONG_MIN, _LONG_SPAN = -(2**63), 2**64
_INT = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_BLANKS = "".join(chr(c) for c in range(0x21))  # what String.trim() removes


def parse_long(text: str) -> int | object:
    """``Long.valueOf(text)``, or ``BAD``."""
    if _INT.fullmatch(text) is None:
        return BAD
    try:  # not int(text): a header of thousands of digits would raise, in another client's dispatch
        value = parse_decimal(text.lstrip("+-"))
    except ValueError:
        return BAD  # more digits than any long
    value = -value if text.startswith("-") else value
    return value if _LONG_MIN <= value < _LONG_MIN + _LONG_SPAN else BAD


def parse_double(text: str) -> float | object:
    """``Double.valueOf(text)`` (without hexadecimal floats), or ``BAD``."""
    text = text.strip(_JAVA_BLANKS)
    if _DOUBLE.fullmatch(text) is None:
        return BAD
    return float(text.rstrip("fFdD"))


def _wrap(n: int) -> int:
    """``n`` as a Java long (two's-complement wrap-around)."""
    if _LONG_MIN <= n < -_LONG_MIN:
        return n
    return (n - _LONG_MIN) % _LONG_SPAN + _LONG_MIN


def _double_cmp(x: float, y: float) -> int:
    if x < y:
        return -1
    if x > y:
        return 1
    if x == y:
        if x == 0.0:  # -0.0 sorts below 0.0
            sx, sy = math.copysign(1.0, x), math.copysign(1.0, y)
            return (sx > sy) - (sx < sy)
        return 0
    xn, yn = x != x, y != y  # NaN sorts above everything, equal to itself
    return (xn > yn) - (xn < yn)


def _num_cmp(a: int | float, b: int | float) -> int:
    if type(a) is int and type(b) is int:
        return (a > b) - (a < b)
    return _double_cmp(float(a), float(b))


def _is_number(v: object) -> bool:
    return type(v) is int or type(v) is float


def _parse_as(kind_of: object, text: str) -> int | float | object:
    return parse_long(text) if type(kind_of) is int else parse_double(text)


def compare(lv: Value, rv: Value) -> int | object:
    """ActiveMQ's ``ComparisonExpression.compare`` of two non-NULL values.

    Returns -1, 0 or 1, or ``BAD`` when the comparison is FALSE whatever
    the operator.  Raises ``Fault`` where ActiveMQ throws.
    """
    lt_, rt_ = type(lv), type(rv)
    if lt_ is rt_:
        if lt_ is float:
            return _double_cmp(lv, rv)  # type: ignore[arg-type]
        return (lv > rv) - (lv < rv)  # type: ignore[operator]
    if lt_ is bool:
        if rt_ is str:
            raise Fault("boolean on the left of a string (ClassCastException in ActiveMQ)")
        return BAD
    if lt_ is int or lt_ is float:
        if rt_ is int or rt_ is float:
            return _num_cmp(lv, rv)  # type: ignore[arg-type]
        if rt_ is str:
            r = _parse_as(lv, rv)  # type: ignore[arg-type]
            return BAD if r is BAD else _num_cmp(lv, r)  # type: ignore[arg-type]
        return BAD
    if lt_ is str:
        if rt_ is bool:
            b = lv.lower() == "true"  # type: ignore[union-attr]
            return (b > rv) - (b < rv)  # type: ignore[operator]
        if rt_ is int or rt_ is float:
            left = _parse_as(rv, lv)  # type: ignore[arg-type]
            return BAD if left is BAD else _num_cmp(left, rv)  # type: ignore[arg-type]
    return BAD


def eq(a: Value, b: Value) -> Value:
    """``a = b``."""
    if a is None or b is None:
        return None
    if type(a) is type(b) and type(a) is not float:
        return a == b
    c = compare(a, b)
    return False if c is BAD else c == 0


def ne(a: Value, b: Value) -> Value:
    """``a <> b``: ActiveMQ builds it as NOT (a = b)."""
    r = eq(a, b)
    return None if r is None else not r


def _ordering(test: Callable[[int], bool]) -> Callable[[Value, Value], Value]:
    def op(a: Value, b: Value) -> Value:
        if a is None or b is None:
            return None
        c = compare(a, b)
        return False if c is BAD else test(c)  # type: ignore[arg-type]

    return op


lt = _ordering(lambda c: c < 0)
le = _ordering(lambda c: c <= 0)
gt = _ordering(lambda c: c > 0)
ge = _ordering(lambda c: c >= 0)

_TESTS: dict[str, Callable[[int], bool]] = {
    "=": lambda c: c == 0,
    "<>": lambda c: c != 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


def constant_comparison(op: str, const: int | float, const_on_left: bool) -> Callable[[Value], Value]:
    """A fast ``v op const`` (or ``const op v``) for one numeric constant.

    Same result as the generic operator; the kind of conversion a string
    gets is decided once, at compile time.
    """
    generic = BINARY[op]
    parse = parse_long if type(const) is int else parse_double
    test = _TESTS[op]
    if_bad = op == "<>"

    def comparison(v: Value) -> Value:
        if type(v) is not str:
            return generic(const, v) if const_on_left else generic(v, const)
        x = parse(v)
        if x is BAD:
            return if_bad
        return test(_num_cmp(const, x) if const_on_left else _num_cmp(x, const))  # type: ignore[arg-type]

    return comparison


def java_string(v: Value) -> str:
    """``String.valueOf(v)`` as Java prints it (for string concatenation)."""
    if type(v) is str:
        return v
    if type(v) is bool:
        return "true" if v else "false"
    if type(v) is int:
        return str(v)
    x = float(v)  # type: ignore[arg-type]
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if 1e-3 <= abs(x) < 1e7 or x == 0.0:
        return repr(x)
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = text[0] + "." + (text[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{len(text) - 1 + int(exponent)}"


def _arith(a: Value, b: Value, fn: Callable[[object, object], object]) -> Value:
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _wrap(fn(a, b))  # type: ignore[arg-type]
    if (ta is int or ta is float) and (tb is int or tb is float):
        return fn(float(a), float(b))  # type: ignore[arg-type,return-value]
    raise Fault("arithmetic on a non-number")


def add(a: Value, b: Value) -> Value:
    """``a + b``: numbers add; a string on the left concatenates."""
    if a is None or b is None:
        return None
    if type(a) is str:
        return a + java_string(b)
    return _arith(a, b, operator.add)


def sub(a: Value, b: Value) -> Value:
    """``a - b``."""
    return None if a is None or b is None else _arith(a, b, operator.sub)


def mul(a: Value, b: Value) -> Value:
    """``a * b``."""
    return None if a is None or b is None else _arith(a, b, operator.mul)


def _doubles(a: Value, b: Value) -> tuple[float, float]:
    if not (_is_number(a) and _is_number(b)):
        raise Fault("arithmetic on a non-number")
    return float(a), float(b)  # type: ignore[arg-type]


def div(a: Value, b: Value) -> Value:
    """``a / b`` in doubles, with Java's Infinity/NaN for a zero divisor."""
    if a is None or b is None:
        return None
    x, y = _doubles(a, b)
    if y == 0.0:
        if x != x or x == 0.0:
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def mod(a: Value, b: Value) -> Value:
    """``a % b`` in doubles (Java's remainder: the sign of the dividend)."""
    if a is None or b is None:
        return None
    x, y = _doubles(a, b)
    if x != x or y != y or math.isinf(x) or y == 0.0:
        return math.nan
    return math.fmod(x, y)


def neg(a: Value) -> Value:
    """``-a``; NULL for anything but a number, as in UnaryExpression.createNegate."""
    if type(a) is int:
        return _wrap(-a)
    if type(a) is float:
        return -a
    return None


def boolcast(v: Value) -> Value:
    """An identifier used as a condition: itself if boolean, NULL if NULL, else FALSE."""
    if v is None or type(v) is bool:
        return v
    return False


def not3(v: Value) -> Value:
    """Three-valued NOT."""
    return None if v is None else not v


def _kleene(stop: bool) -> Callable[..., Value]:
    """Three-valued AND (``stop=False``) or OR (``stop=True``) over thunks.

    Operands are evaluated left to right, and evaluation stops at the first
    one equal to ``stop``, as in ActiveMQ's LogicExpression.evaluate.
    """

    def combine(*operands: Callable[[], Value]) -> Value:
        unknown = False
        for operand in operands:
            v = operand()
            if v is stop:
                return stop
            unknown = unknown or v is None
        return None if unknown else not stop

    return combine


and_v = _kleene(False)
or_v = _kleene(True)


def in_test(values: frozenset[str], negated: bool) -> Callable[[Value], Value]:
    """``v [NOT] IN (...)``: NULL unless ``v`` is a string, as in ActiveMQ."""

    def test(v: Value) -> Value:
        if type(v) is not str:
            return None
        return (v in values) != negated

    return test


BINARY: dict[str, Callable[[Value, Value], Value]] = {
    "=": eq,
    "<>": ne,
    "<": lt,
    "<=": le,
    ">": gt,
    ">=": ge,
    "+": add,
    "-": sub,
    "*": mul,
    "/": div,
    "%": mod,
}
