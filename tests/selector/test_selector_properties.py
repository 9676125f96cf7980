"""Property tests: generated selectors against a tiny reference evaluator.

The reference below is written from the rules, independently of the
compiler: it walks the generated tree directly instead of parsing text.  The
compiled selector, reached through its text, must agree with it for every
generated tree and message.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.selector import SelectorError, compile_selector
from minibroker.selector.like import LikePattern

Tree = tuple[Any, ...]
HEADERS = ("a", "b", "c")
VALUES = ("1", "2", "2.0", "x", "", "-2", " 1", "2.5", "it's")
STRINGS = ("1", "2", "x", "", "it's")
NUMBERS = (-2, 0, 1, 2, 3, 0.5, 2.0, 2.5)
OPS = ("=", "<>", "<", ">", "<=", ">=")

header = st.sampled_from(HEADERS)
leaves = st.one_of(
    st.tuples(st.just("cmp"), header, st.sampled_from(("=", "<>")), st.sampled_from(STRINGS)),
    st.tuples(st.just("cmp"), header, st.sampled_from(OPS), st.sampled_from(NUMBERS)),
    st.tuples(st.just("isnull"), header, st.booleans()),
    st.tuples(
        st.just("in"), header, st.lists(st.sampled_from(STRINGS), min_size=1, max_size=3).map(tuple), st.booleans()
    ),
    st.tuples(st.just("like"), header, st.text(alphabet="12x%_", max_size=4), st.booleans()),
    st.tuples(st.just("between"), header, st.integers(-2, 3), st.integers(-2, 3), st.booleans()),
    st.tuples(st.just("const"), st.sampled_from((True, False, None))),
    st.tuples(st.just("prio"), st.sampled_from(OPS), st.integers(0, 9)),
)
trees = st.recursive(
    leaves,
    lambda sub: st.one_of(
        st.tuples(st.just("and"), sub, sub),
        st.tuples(st.just("or"), sub, sub),
        st.tuples(st.just("not"), sub),
    ),
    max_leaves=8,
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "a": st.sampled_from(VALUES),
        "b": st.sampled_from(VALUES),
        "c": st.sampled_from(VALUES),
        "priority": st.sampled_from(("0", "4", "9", "x")),
    },
)


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def render(tree: Tree) -> str:
    """Selector text for a tree, parenthesized everywhere."""
    kind = tree[0]
    if kind == "cmp":
        return f"({tree[1]} {tree[2]} {_literal(tree[3])})"
    if kind == "isnull":
        return f"({tree[1]} IS {'NOT ' if tree[2] else ''}NULL)"
    if kind == "in":
        return f"({tree[1]} {'NOT ' if tree[3] else ''}IN ({', '.join(map(_literal, tree[2]))}))"
    if kind == "like":
        return f"({tree[1]} {'NOT ' if tree[3] else ''}LIKE {_literal(tree[2])})"
    if kind == "between":
        return f"({tree[1]} {'NOT ' if tree[4] else ''}BETWEEN {tree[2]} AND {tree[3]})"
    if kind == "const":
        return {True: "TRUE", False: "FALSE", None: "NULL"}[tree[1]]
    if kind == "prio":
        return f"(JMSPriority {tree[1]} {tree[2]})"
    if kind == "not":
        return f"NOT {render(tree[1])}"
    return f"({render(tree[1])} {kind.upper()} {render(tree[2])})"


# -- the reference evaluator --------------------------------------------------


def _as_number(text: str, like: object) -> float | None:
    """The string as a number of the literal's kind, or None if it is not one."""
    if isinstance(like, int):
        return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None
    t = text.strip()
    return float(t) if re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)", t) else None


def _order(x: float, op: str, k: float) -> bool:
    return {"=": x == k, "<>": x != k, "<": x < k, ">": x > k, "<=": x <= k, ">=": x >= k}[op]


def _kleene_and(p: bool | None, q: bool | None) -> bool | None:
    if p is False or q is False:
        return False
    return None if p is None or q is None else True


def _kleene_not(p: bool | None) -> bool | None:
    return None if p is None else not p


def reference(tree: Tree, h: dict[str, str]) -> bool | None:
    kind = tree[0]
    if kind == "and":
        return _kleene_and(reference(tree[1], h), reference(tree[2], h))
    if kind == "or":
        return _kleene_not(_kleene_and(_kleene_not(reference(tree[1], h)), _kleene_not(reference(tree[2], h))))
    if kind == "not":
        return _kleene_not(reference(tree[1], h))
    if kind == "const":
        return tree[1]
    if kind == "prio":
        raw = h.get("priority", "4")
        if not raw.isdigit():
            return None
        return _order(int(raw), tree[1], tree[2])
    v = h.get(tree[1])
    if kind == "isnull":
        return (v is None) != tree[2]
    if v is None:
        return None
    if kind == "cmp":
        _, _, op, lit = tree
        if isinstance(lit, str):
            return (v == lit) if op == "=" else (v != lit)
        x = _as_number(v, lit)
        return (op == "<>") if x is None else _order(x, op, lit)
    if kind == "in":
        return (v in tree[2]) != tree[3]
    if kind == "like":
        regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in tree[2])
        return (re.fullmatch(regex, v, re.DOTALL) is not None) != tree[3]
    if kind == "between":
        x = _as_number(v, 0)
        if x is None:
            return False
        inside = tree[2] <= x <= tree[3]
        return inside != tree[4]
    raise AssertionError(kind)


# -- properties ---------------------------------------------------------------


@settings(max_examples=600, deadline=None)
@given(trees, messages)
def test_compiled_selector_agrees_with_reference(tree: Tree, h: dict[str, str]) -> None:
    sel = compile_selector(render(tree))
    expected = reference(tree, h)
    assert sel.evaluate(h) is expected
    assert sel.matches(h) is (expected is True)


@settings(max_examples=300, deadline=None)
@given(trees, messages)
def test_double_negation_and_value_path(tree: Tree, h: dict[str, str]) -> None:
    text = render(tree)
    value = compile_selector(text).evaluate(h)
    assert compile_selector(f"NOT (NOT {text})").evaluate(h) is value
    # '(FALSE OR e) = TRUE' goes through the value path (and_v/or_v, _eq).
    assert compile_selector(f"(FALSE OR {text}) = TRUE").evaluate(h) is value


@settings(max_examples=300, deadline=None)
@given(trees, trees, messages)
def test_de_morgan(p: Tree, q: Tree, h: dict[str, str]) -> None:
    a, b = render(p), render(q)
    for op, dual in (("AND", "OR"), ("OR", "AND")):
        left = compile_selector(f"NOT ({a} {op} {b})")
        right = compile_selector(f"(NOT {a}) {dual} (NOT {b})")
        assert left.evaluate(h) is right.evaluate(h)
        assert left.matches(h) is right.matches(h)


def _activemq_like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """ActiveMQ's own translation of LIKE into a regex (LikeExpression)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern) and pattern[i + 1] in ("_", "%", escape):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*?" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


@settings(max_examples=800, deadline=None)
@given(
    st.text(alphabet="ab%_!", max_size=8),
    st.text(alphabet="ab%_!\n", max_size=8),
    st.sampled_from([None, "!", "%", "a"]),
)
def test_like_matcher_agrees_with_activemq_regex(pattern: str, value: str, escape: str | None) -> None:
    expected = _activemq_like_regex(pattern, escape).fullmatch(value) is not None
    assert LikePattern(pattern, escape).matches(value) is expected


_FRAGMENTS = st.sampled_from(
    [
        "a",
        "b",
        "'x'",
        "''",
        "1",
        "2.5",
        "0x1F",
        "(",
        ")",
        "=",
        "<>",
        "<",
        ">=",
        "+",
        "-",
        "*",
        "/",
        "%",
        ",",
        "AND",
        "OR",
        "NOT",
        "IS",
        "NULL",
        "LIKE",
        "ESCAPE",
        "IN",
        "BETWEEN",
        "TRUE",
        "'",
        "--",
        "/*",
        "*/",
        "\n",
        "JMSPriority",
        "#",
        ".",
        "$x",
        " ",
    ]
)


@settings(max_examples=800, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=12).map(" ".join), messages)
def test_any_text_compiles_or_raises_selector_error(text: str, h: dict[str, str]) -> None:
    try:
        sel = compile_selector(text)
    except SelectorError as err:
        assert 0 <= err.position <= len(text)
        assert "\n" not in str(err)
        return
    assert sel.matches(h) is (sel.evaluate(h) is True)
