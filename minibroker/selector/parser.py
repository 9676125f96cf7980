"""Recursive-descent parser for ActiveMQ's selector grammar.

Theory of operation
-------------------
One method per rule of ActiveMQ's ``SelectorParser.jj``, from the loosest
binding to the tightest::

    selector    := or EOF
    or          := and ( OR and )*
    and         := equality ( AND equality )*
    equality    := comparison ( '=' comparison | '<>' comparison
                              | IS NULL | IS NOT NULL )*
    comparison  := additive ( ('>' | '>=' | '<' | '<=') additive
                            | [NOT] LIKE string [ESCAPE string]
                            | [NOT] BETWEEN additive AND additive
                            | [NOT] IN '(' string (',' string)* ')' )*
    additive    := multiplicative ( ('+' | '-') multiplicative )*
    multiplicative := unary ( ('*' | '/' | '%') unary )*
    unary       := '+' unary | '-' unary | NOT unary | primary
    primary     := literal | identifier | '(' or ')'

Two consequences surprise people and are ActiveMQ's, not ours:

- ``=``/``<>`` bind *looser* than ``<``, ``LIKE``, ``IN`` and ``BETWEEN``;
- ``NOT`` is a prefix operator of the tightest level, so ``NOT a = 1``
  means ``(NOT a) = 1`` and not ``NOT (a = 1)``.  Such a selector never
  matches a STOMP message in ActiveMQ; we parse it the same way and add a
  warning telling the user to write ``NOT (a = 1)``.

The parser also applies ActiveMQ's compile-time checks
(``ComparisonExpression.checkLessThanOperand``/``checkEqualOperand``,
``createInFilter``, ``createLike``, and ``asBooleanExpression`` in the
grammar): ordering against a string, boolean or NULL literal, ``= NULL``, IN
after anything but an identifier, a multi-character ESCAPE, and a non-boolean
selector or AND/OR/NOT operand are errors.

Nesting is bounded twice with the same limit: the parser's own recursion
(parentheses and prefix operators) and the depth of the tree it builds
(long left-associative chains such as ``a+a+a+...``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from .errors import SelectorError
from .lexer import Token, tokenize
from .nodes import (
    Arith,
    Compare,
    Const,
    In,
    IsNull,
    Like,
    Logic,
    Node,
    Prop,
    Unary,
    is_boolean,
)

__all__ = ["parse"]

_ORDERING = (">", ">=", "<", "<=")


def parse(text: str, max_depth: int) -> tuple[Node, list[str]]:
    """Parse ``text`` into a boolean tree; return it with any warnings.

    Raises:
        SelectorError: for any malformed selector, with the fault's position.
    """
    tokens, warnings = tokenize(text)
    parser = _Parser(text, tokens, max_depth)
    root = parser.selector()
    return root, warnings + parser.warnings


def _describe(tok: Token) -> str:
    if tok.kind == "EOF":
        return "end of selector"
    if tok.kind == "OP":
        return f"'{tok.text}'"
    if tok.kind == "KW":
        return tok.text.upper()
    if tok.kind == "ID":
        return f"identifier {tok.text}"
    text = tok.text if len(tok.text) <= 24 else tok.text[:20] + "...'"
    return f"string {text}" if tok.kind == "STR" else f"number {text}"


def _render(node: Node) -> str:
    if isinstance(node, Const):
        v = node.value
        if v is None or isinstance(v, bool):
            return {None: "NULL", True: "TRUE", False: "FALSE"}[v]
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        return repr(v)
    if is_boolean(node):
        return "a condition"
    return "an identifier" if isinstance(node, Prop) else "an arithmetic expression"


class _Parser:
    def __init__(self, text: str, tokens: list[Token], max_depth: int) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0
        self.max_depth = max_depth
        self.nesting = 0
        self.warnings: list[str] = []
        self.parenthesized: set[int] = set()

    # -- token helpers -----------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, kind: str, value: object, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == kind and tok.value == value

    def expect(self, kind: str, value: object, expected: str) -> Token:
        tok = self.peek()
        if tok.kind != kind or (value is not None and tok.value != value):
            self.fail(tok, expected)
        return self.advance()

    def fail(self, tok: Token, expected: str) -> NoReturn:
        raise SelectorError(f"unexpected {_describe(tok)}", tok.pos, self.text, expected)

    def error(self, reason: str, pos: int) -> NoReturn:
        raise SelectorError(reason, pos, self.text)

    def depth(self, pos: int, *children: Node) -> int:
        depth = 1 + max(child.depth for child in children)
        if depth > self.max_depth:
            self.error(f"expression nested deeper than {self.max_depth} levels", pos)
        return depth

    def nest(self, pos: int) -> None:
        self.nesting += 1
        if self.nesting > self.max_depth:
            self.error(f"expression nested deeper than {self.max_depth} levels", pos)

    # -- boolean typing and ActiveMQ's compile-time checks ---------------------

    def as_boolean(self, node: Node, role: str) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Prop):
            return Unary("BOOL", node, node.pos, self.depth(node.pos, node))
        self.error(f"{_render(node)} is not a condition, so it cannot be {role}", node.pos)

    def check_ordering_operand(self, node: Node, op: str) -> None:
        if isinstance(node, Const):
            v = node.value
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return
            self.error(f"{_render(node)} cannot be compared with '{op}' (only numbers can)", node.pos)
        if is_boolean(node):
            self.error(f"a condition cannot be compared with '{op}'{self.not_hint(node)}", node.pos)

    def not_hint(self, node: Node) -> str:
        """A hint when ``node`` is ``NOT x`` written without parentheses."""
        if isinstance(node, Unary) and node.op == "NOT" and id(node) not in self.parenthesized:
            return " (NOT binds tighter than comparisons: write NOT ( ... ) around the comparison)"
        return ""

    def warn_not_precedence(self, left: Node, what: str) -> None:
        if self.not_hint(left):
            self.warnings.append(
                f"NOT at position {left.pos} applies only to the operand right after it"
                f" (ActiveMQ precedence), not to the {what}; write NOT ( ... ) around the"
                " whole comparison"
            )

    # -- grammar -------------------------------------------------------------

    def selector(self) -> Node:
        if self.peek().kind == "EOF":
            raise SelectorError("empty selector", self.peek().pos, self.text, "a condition")
        node = self.or_expr()
        tok = self.peek()
        if tok.kind != "EOF":
            if tok.kind == "KW" and tok.value == "NOT":
                self.fail(self.peek(1), "LIKE, IN or BETWEEN after NOT")
            self.fail(tok, "an operator, AND, OR or the end of the selector")
        return self.as_boolean(node, "a selector")

    def or_expr(self) -> Node:
        return self.logic_chain("OR", self.and_expr)

    def and_expr(self) -> Node:
        return self.logic_chain("AND", self.equality)

    def logic_chain(self, op: str, operand: Callable[[], Node]) -> Node:
        left = operand()
        while self.at("KW", op):
            tok = self.advance()
            left = self.logic(op, left, operand(), tok)
        return left

    def logic(self, op: str, left: Node, right: Node, tok: Token) -> Node:
        a = self.as_boolean(left, f"an operand of {op}")
        b = self.as_boolean(right, f"an operand of {op}")
        if isinstance(a, Logic) and a.op == op:
            return Logic(op, a.operands + (b,), a.pos, max(a.depth, self.depth(tok.pos, b)))
        return Logic(op, (a, b), a.pos, self.depth(tok.pos, a, b))

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            tok = self.peek()
            if tok.kind == "OP" and tok.value in ("=", "<>"):
                self.advance()
                left = self.compare(str(tok.value), left, self.comparison(), tok)
            elif tok.kind == "KW" and tok.value == "IS":
                self.advance()
                negated = self.at("KW", "NOT")
                if negated:
                    self.advance()
                self.expect("KW", "NULL", "NULL after IS NOT" if negated else "NULL or NOT NULL after IS")
                self.warn_not_precedence(left, "IS NULL test")
                left = IsNull(left, negated, left.pos, self.depth(tok.pos, left))
            else:
                return left

    def comparison(self) -> Node:
        left = self.additive()
        while True:
            tok = self.peek()
            negated = tok.kind == "KW" and tok.value == "NOT"
            nxt = self.peek(1) if negated else tok
            if tok.kind == "OP" and tok.value in _ORDERING:
                self.advance()
                left = self.compare(str(tok.value), left, self.additive(), tok)
            elif nxt.kind == "KW" and nxt.value in ("LIKE", "BETWEEN", "IN"):
                if negated:
                    self.advance()
                self.advance()
                rule = {"LIKE": self.like, "BETWEEN": self.between, "IN": self.in_list}
                left = rule[str(nxt.value)](left, negated, nxt)
            else:
                return left

    def compare(self, op: str, left: Node, right: Node, tok: Token) -> Node:
        if op in _ORDERING:
            self.check_ordering_operand(left, op)
            self.check_ordering_operand(right, op)
        else:
            for side in (left, right):
                if isinstance(side, Const) and side.value is None:
                    self.error(f"NULL cannot be compared with '{op}', use IS NULL", side.pos)
            if isinstance(left, Const) and isinstance(left.value, bool):
                if isinstance(right, Const) and not isinstance(right.value, bool):
                    self.error(f"{_render(left)} cannot be compared with {_render(right)}", left.pos)
                if not isinstance(right, Const):
                    self.warnings.append(
                        f"{_render(left)} at position {left.pos} is on the left of '{op}': ActiveMQ"
                        " fails to compare it with a string header and the message never"
                        " matches; put the header on the left"
                    )
        self.warn_not_precedence(left, f"'{op}' comparison")
        return Compare(op, left, right, left.pos, self.depth(tok.pos, left, right))

    def like(self, left: Node, negated: bool, tok: Token) -> Node:
        pattern = self.expect("STR", None, "a quoted pattern after LIKE")
        escape = None
        if self.at("KW", "ESCAPE"):
            self.advance()
            esc = self.expect("STR", None, "a quoted character after ESCAPE")
            escape = str(esc.value)
            if len(escape) != 1:
                self.error(f"ESCAPE takes exactly one character, not {len(escape)}", esc.pos)
        self.warn_not_precedence(left, "LIKE test")
        return Like(left, str(pattern.value), escape, negated, left.pos, self.depth(tok.pos, left))

    def between(self, left: Node, negated: bool, tok: Token) -> Node:
        low = self.additive()
        and_tok = self.expect("KW", "AND", "AND between the bounds of BETWEEN")
        high = self.additive()
        for node in (left, low, high):
            self.check_ordering_operand(node, "BETWEEN")
        self.warn_not_precedence(left, "BETWEEN test")
        if negated:
            first = Compare("<", left, low, left.pos, self.depth(tok.pos, left, low))
            second = Compare(">", left, high, left.pos, self.depth(tok.pos, left, high))
        else:
            first = Compare(">=", left, low, left.pos, self.depth(tok.pos, left, low))
            second = Compare("<=", left, high, left.pos, self.depth(tok.pos, left, high))
        return self.logic("OR" if negated else "AND", first, second, and_tok)

    def in_list(self, left: Node, negated: bool, tok: Token) -> Node:
        self.expect("OP", "(", "'(' after IN")
        values = [str(self.expect("STR", None, "a quoted string in the IN list").value)]
        while self.at("OP", ","):
            self.advance()
            values.append(str(self.expect("STR", None, "a quoted string in the IN list").value))
        self.expect("OP", ")", "',' or ')' in the IN list")
        if not isinstance(left, Prop):
            self.error(f"IN needs an identifier on its left{self.not_hint(left)}", left.pos)
        return In(left, tuple(values), negated, left.pos, self.depth(tok.pos, left))

    def additive(self) -> Node:
        return self.arith_chain(("+", "-"), self.multiplicative)

    def multiplicative(self) -> Node:
        return self.arith_chain(("*", "/", "%"), self.unary)

    def arith_chain(self, ops: tuple[str, ...], operand: Callable[[], Node]) -> Node:
        left = operand()
        while self.peek().kind == "OP" and self.peek().value in ops:
            tok = self.advance()
            right = operand()
            left = Arith(str(tok.value), left, right, left.pos, self.depth(tok.pos, left, right))
        return left

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "OP" and tok.value in ("+", "-"):
            self.advance()
            self.nest(tok.pos)
            operand = self.unary()
            self.nesting -= 1
            if tok.value == "+":
                return operand
            return Unary("-", operand, tok.pos, self.depth(tok.pos, operand))
        if tok.kind == "KW" and tok.value == "NOT":
            self.advance()
            self.nest(tok.pos)
            operand = self.as_boolean(self.unary(), "the operand of NOT")
            self.nesting -= 1
            return Unary("NOT", operand, tok.pos, self.depth(tok.pos, operand))
        if tok.kind == "KW" and tok.value in ("XPATH", "XQUERY"):
            self.error(f"{tok.value} selectors are not supported", tok.pos)
        if tok.kind == "ID" and self.at("OP", "(", 1):
            self.error(f"function calls such as {tok.text}(...) are not supported", tok.pos)
        return self.primary()

    def primary(self) -> Node:
        tok = self.peek()
        if tok.kind in ("STR", "INT", "FLOAT"):
            self.advance()
            return Const(tok.value, tok.pos)  # type: ignore[arg-type]
        if tok.kind == "KW" and tok.value in ("TRUE", "FALSE", "NULL"):
            self.advance()
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[str(tok.value)], tok.pos)
        if tok.kind == "ID":
            self.advance()
            return Prop(tok.text, tok.pos)
        if tok.kind == "OP" and tok.value == "(":
            self.advance()
            self.nest(tok.pos)
            node = self.or_expr()
            self.expect("OP", ")", "')' or an operator")
            self.nesting -= 1
            self.parenthesized.add(id(node))
            return node
        self.fail(tok, "an identifier, a literal, NOT, '-' or '('")
