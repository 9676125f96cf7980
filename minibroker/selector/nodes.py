"""The parsed selector: a small tree of frozen nodes.

Every node records ``pos`` (the offset of its first character, for error
messages) and ``depth`` (1 for a leaf, 1 + the deepest child otherwise), which
the parser bounds so that neither code generation nor evaluation can recurse
without limit.

``BETWEEN`` and ``NOT BETWEEN`` have no node of their own: as in ActiveMQ's
``ComparisonExpression.createBetween`` they become ``v >= lo AND v <= hi`` and
``v < lo OR v > hi``.  ``AND``/``OR`` chains are flattened into one ``Logic``
node, as ActiveMQ's ``LogicExpression.createAND/createOR`` do.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Arith",
    "Compare",
    "Const",
    "In",
    "IsNull",
    "Like",
    "Logic",
    "Node",
    "Prop",
    "Unary",
    "Value",
    "is_boolean",
]

# A value during evaluation: NULL (None), a boolean, an exact numeric (int),
# an approximate numeric (float) or a string.
Value = None | bool | int | float | str


@dataclass(frozen=True, slots=True)
class Const:
    """A literal: a string, a number, TRUE, FALSE or NULL (``None``)."""

    value: Value
    pos: int
    depth: int = 1


@dataclass(frozen=True, slots=True)
class Prop:
    """An identifier: a message property (STOMP header) or a JMS header name."""

    name: str
    pos: int
    depth: int = 1


@dataclass(frozen=True, slots=True)
class Unary:
    """``op`` is '-' (negate), 'NOT', or 'BOOL' (an identifier used as a condition)."""

    op: str
    operand: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Arith:
    """``left op right`` with ``op`` one of + - * / %."""

    op: str
    left: Node
    right: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right`` with ``op`` one of = <> < > <= >=."""

    op: str
    left: Node
    right: Node
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Logic:
    """``AND`` or ``OR`` over two or more boolean operands, left to right."""

    op: str
    operands: tuple[Node, ...]
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class Like:
    """``operand [NOT] LIKE pattern [ESCAPE escape]``."""

    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class In:
    """``operand [NOT] IN ('a', 'b', ...)``; the operand is always a ``Prop``."""

    operand: Prop
    values: tuple[str, ...]
    negated: bool
    pos: int
    depth: int


@dataclass(frozen=True, slots=True)
class IsNull:
    """``operand IS [NOT] NULL``."""

    operand: Node
    negated: bool
    pos: int
    depth: int


Node = Const | Prop | Unary | Arith | Compare | Logic | Like | In | IsNull


def is_boolean(node: Node) -> bool:
    """True for nodes ActiveMQ types as a ``BooleanExpression``.

    These may stand as a whole selector and as operands of AND, OR and NOT.
    TRUE, FALSE and NULL literals count; other literals and arithmetic don't.
    """
    if isinstance(node, Const):
        return node.value is None or isinstance(node.value, bool)
    if isinstance(node, Unary):
        return node.op != "-"
    return isinstance(node, (Compare, Logic, Like, In, IsNull))
