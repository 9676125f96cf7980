"""Compile a parsed selector into two plain Python functions.

Theory of operation
-------------------
A selector runs for every message and every consumer, so the tree is turned
into Python source once and compiled with ``compile``.  The source is made
only from the tree: every literal, header name, pattern and helper is bound
to a generated name (``_k3``) in the function's globals, so no character of
the user's selector ever appears in the generated code.

For each boolean node three renderings exist:

- ``t(node)``: a Python expression that is True exactly when the node is TRUE;
- ``f(node)``: True exactly when the node is FALSE;
- ``v(node)``: the node's value (None for NULL, a bool, a number, a string).

Three-valued logic then costs nothing at the top: a message matches when
``t(root)`` holds, ``t(a AND b)`` is ``t(a) and t(b)``, ``t(a OR b)`` is
``t(a) or t(b)``, ``t(NOT a)`` is ``f(a)``, and ``f`` mirrors it by De
Morgan.  Python's ``and``/``or`` short-circuit left to right, as ActiveMQ's
LogicExpression does, so a fault further right (see ``values``) is reached
only when ActiveMQ would reach it too.  Where a logical result is needed as
a value (``(a OR b) = FALSE``), ``v`` calls ``and_v``/``or_v`` with one
lambda per operand, keeping the code linear in the size of the tree.

Leaves that dominate real selectors get inline code: a header compared with
a string (``g(k) == s``), a header IN a set (``g(k) in S``), and a comparison
with a numeric constant (a comparator built once, see
``values.constant_comparison``).  Everything else calls the generic helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from . import values
from .headers import resolve
from .like import like_test
from .nodes import Arith, Compare, Const, In, IsNull, Like, Logic, Node, Prop, Unary, Value

__all__ = ["compile_tree"]

_HELPERS: dict[str, object] = {
    "_Fault": values.Fault,
    "_and_v": values.and_v,
    "_or_v": values.or_v,
    "_neg": values.neg,
    "_not3": values.not3,
    "_boolcast": values.boolcast,
    "_eq": values.eq,
    "_ne": values.ne,
    "_lt": values.lt,
    "_le": values.le,
    "_gt": values.gt,
    "_ge": values.ge,
    "_add": values.add,
    "_sub": values.sub,
    "_mul": values.mul,
    "_div": values.div,
    "_mod": values.mod,
}
_OP_HELPER = {
    "=": "_eq",
    "<>": "_ne",
    "<": "_lt",
    "<=": "_le",
    ">": "_gt",
    ">=": "_ge",
    "+": "_add",
    "-": "_sub",
    "*": "_mul",
    "/": "_div",
    "%": "_mod",
}
_UNARY_HELPER = {"-": "_neg", "NOT": "_not3", "BOOL": "_boolcast"}

_TEMPLATE = """\
def _match(h):
    try:
        g = h.get
        return {truth}
    except _Fault:
        return False

def _evaluate(h):
    try:
        g = h.get
        return {value}
    except _Fault:
        return None
"""

Matcher = Callable[[Mapping[str, str]], bool]
Evaluator = Callable[[Mapping[str, str]], Value]


def compile_tree(root: Node) -> tuple[Matcher, Evaluator, str]:
    """Return ``(matches, evaluate, source)`` for a boolean tree."""
    gen = _Codegen()
    source = _TEMPLATE.format(truth=gen.t(root), value=gen.v(root))
    namespace = gen.namespace
    exec(compile(source, "<selector>", "exec"), namespace)  # generated from the tree only
    return namespace["_match"], namespace["_evaluate"], source  # type: ignore[return-value]


def _is_number(value: Value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Codegen:
    def __init__(self) -> None:
        self.namespace: dict[str, object] = dict(_HELPERS)
        self.count = 0

    def bind(self, obj: object) -> str:
        """A fresh global name bound to ``obj``."""
        name = f"_k{self.count}"
        self.count += 1
        self.namespace[name] = obj
        return name

    def temp(self) -> str:
        name = f"_t{self.count}"
        self.count += 1
        return name

    def header(self, node: Node) -> str | None:
        """``g(key)`` when ``node`` reads a plain STOMP header, else None."""
        if isinstance(node, Prop):
            source = resolve(node.name)
            if isinstance(source, str):
                return f"g({self.bind(source)})"
        return None

    def string_equality(self, node: Node) -> tuple[str, str] | None:
        """(header read, bound string) for ``header = 'str'`` in either order."""
        if not isinstance(node, Compare) or node.op not in ("=", "<>"):
            return None
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(b, Const) and type(b.value) is str:
                read = self.header(a)
                if read is not None:
                    return read, self.bind(b.value)
        return None

    # -- values ----------------------------------------------------------------

    def v(self, node: Node) -> str:
        """Expression for ``node``'s value (None, bool, int, float or str)."""
        if isinstance(node, Const):
            if node.value is None or isinstance(node.value, bool):
                return repr(node.value)
            return self.bind(node.value)
        if isinstance(node, Prop):
            source = resolve(node.name)
            if source is None:
                return "None"
            if isinstance(source, str):
                return f"g({self.bind(source)})"
            return f"{self.bind(source)}(h)"
        if isinstance(node, Unary):
            return f"{_UNARY_HELPER[node.op]}({self.v(node.operand)})"
        if isinstance(node, Compare):
            return self.compare_value(node)
        if isinstance(node, Arith):
            return f"{_OP_HELPER[node.op]}({self.v(node.left)}, {self.v(node.right)})"
        if isinstance(node, Logic):
            helper = "_and_v" if node.op == "AND" else "_or_v"
            return f"{helper}({', '.join('lambda: ' + self.v(o) for o in node.operands)})"
        if isinstance(node, Like):
            test = like_test(node.pattern, node.escape, node.negated)
            return f"{self.bind(test)}({self.v(node.operand)})"
        if isinstance(node, In):
            test = values.in_test(frozenset(node.values), node.negated)
            return f"{self.bind(test)}({self.v(node.operand)})"
        if isinstance(node, IsNull):
            return f"({self.v(node.operand)} is {'not ' if node.negated else ''}None)"
        raise TypeError(f"unknown node {node!r}")

    def compare_value(self, node: Compare) -> str:
        special = self.string_equality(node)
        if special is not None:
            read, s = special
            t = self.temp()
            test = "==" if node.op == "=" else "!="
            return f"(None if ({t} := {read}) is None else {t} {test} {s})"
        for const, other, on_left in ((node.right, node.left, False), (node.left, node.right, True)):
            if isinstance(const, Const) and _is_number(const.value):
                fn = values.constant_comparison(node.op, const.value, on_left)  # type: ignore[arg-type]
                return f"{self.bind(fn)}({self.v(other)})"
        return f"{_OP_HELPER[node.op]}({self.v(node.left)}, {self.v(node.right)})"

    # -- truth ---------------------------------------------------------------

    def t(self, node: Node) -> str:
        """Expression that is True exactly when ``node`` is TRUE."""
        return self.truth(node, True)

    def f(self, node: Node) -> str:
        """Expression that is True exactly when ``node`` is FALSE."""
        return self.truth(node, False)

    def truth(self, node: Node, want: bool) -> str:
        """Expression that is True exactly when ``node``'s value is ``want``."""
        if isinstance(node, Const):
            return "True" if node.value is want else "False"
        if isinstance(node, Unary) and node.op == "NOT":
            return self.truth(node.operand, not want)
        if isinstance(node, Logic):
            # TRUE AND: all TRUE; FALSE AND: any FALSE; and the reverse for OR.
            joiner = " and " if (node.op == "AND") == want else " or "
            return "(" + joiner.join(self.truth(o, want) for o in node.operands) + ")"
        if isinstance(node, IsNull):
            test = "is not" if node.negated == want else "is"
            return f"({self.v(node.operand)} {test} None)"
        special = self.inline(node, want)
        return special if special is not None else f"({self.v(node)} is {want})"

    def inline(self, node: Node, want: bool) -> str | None:
        """Inline code for ``header = 'str'`` and ``header IN (...)`` being ``want``."""
        if isinstance(node, In):
            read = self.header(node.operand)
            if read is None:
                return None
            member = want != node.negated  # looking for "value in the set"
            s = self.bind(frozenset(node.values))
            if member:
                return f"({read} in {s})"
            t = self.temp()
            return f"(({t} := {read}).__class__ is str and {t} not in {s})"
        special = self.string_equality(node)
        if special is None or not isinstance(node, Compare):
            return None
        read, s = special
        if want == (node.op == "="):
            return f"({read} == {s})"
        t = self.temp()
        return f"(({t} := {read}) is not None and {t} != {s})"
