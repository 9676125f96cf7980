"""Malformed selectors, limits, warnings and the compiled object itself."""

from __future__ import annotations

import inspect
import sys

import pytest

from minibroker.selector import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_LENGTH,
    Selector,
    SelectorError,
    compile_selector,
)

# (selector, position of the fault, a fragment of the message)
MALFORMED: list[tuple[str, int, str]] = [
    ("color = 'red' AND )", 18, "unexpected ')'"),
    ("", 0, "empty selector"),
    ("   ", 3, "empty selector"),
    ("a =", 3, "unexpected end of selector"),
    ("a = 1 b", 6, "unexpected identifier b"),
    ("a == 1", 3, "unexpected '='"),
    ("a != 1", 2, "unexpected character '!'"),
    ("a = 'x", 4, "unterminated string"),
    ("(a = 1", 6, "expected ')'"),
    ("a = 1)", 5, "unexpected ')'"),
    ("a = 1\n)", 6, "unexpected ')'"),
    ("a IN ()", 6, "a quoted string in the IN list"),
    ("a IN ('x',)", 10, "a quoted string in the IN list"),
    ("a IN ('x' 'y')", 10, "',' or ')'"),
    ("a IN 'x'", 5, "'(' after IN"),
    ("a IN (1, 2)", 6, "unexpected number 1"),
    ("'a' IN ('a')", 0, "IN needs an identifier"),
    ("a + 1 IN ('x')", 0, "IN needs an identifier"),
    ("a LIKE b", 7, "a quoted pattern after LIKE"),
    ("a LIKE 'x' ESCAPE 'ab'", 18, "exactly one character"),
    ("a LIKE 'x' ESCAPE ''", 18, "exactly one character"),
    ("a LIKE 'x' ESCAPE", 17, "a quoted character after ESCAPE"),
    ("a BETWEEN 1 OR 2", 12, "AND between the bounds"),
    ("a BETWEEN 'a' AND 'b'", 10, "'a' cannot be compared with 'BETWEEN'"),
    ("a > 'x'", 4, "'x' cannot be compared with '>'"),
    ("'x' < a", 0, "'x' cannot be compared with '<'"),
    ("a >= TRUE", 5, "TRUE cannot be compared"),
    ("a <= NULL", 5, "NULL cannot be compared"),
    ("a < (b = 1)", 5, "a condition cannot be compared"),
    ("a = NULL", 4, "use IS NULL"),
    ("NULL = a", 0, "use IS NULL"),
    ("a <> NULL", 5, "use IS NULL"),
    ("TRUE = 1", 0, "TRUE cannot be compared with 1"),
    ("3 + 5", 0, "not a condition"),  # ActiveMQ SelectorTest.testInvalidSelector
    ("TRUE AND 3 + 5", 9, "not a condition"),  # ditto
    ("=TEST 'test'", 0, "unexpected '='"),  # ditto
    ("'abc'", 0, "'abc' is not a condition"),
    ("5", 0, "5 is not a condition"),
    ("-a", 0, "not a condition"),
    ("NOT 5", 4, "the operand of NOT"),
    ("a AND", 5, "unexpected end of selector"),
    ("OR a", 0, "unexpected OR"),
    ("a AND 1", 6, "an operand of AND"),
    ("a IS 5", 5, "NULL or NOT NULL after IS"),
    ("a IS NOT 5", 9, "NULL after IS NOT"),
    ("a NOT 5", 6, "LIKE, IN or BETWEEN after NOT"),
    ("XPATH '//a'", 0, "XPATH selectors are not supported"),
    ("xquery 'x'", 0, "XQUERY selectors are not supported"),
    ("f(a) = 1", 0, "function calls"),
    ("a.b = 1", 1, "unexpected character '.'"),
    ("0x = 1", 1, "unexpected identifier x"),  # octal 0, then x
    ("08 = x", 1, "unexpected number 8"),  # octal 0, then 8
    ("1.5.3 = x", 3, "unexpected number .3"),
    ("0xFFFFFFFFFFFFFFFF = x", 0, "does not fit in 64 bits"),
    ("a = 1 /* unterminated", 7, "unexpected '*'"),
    ("NOT a IN ('x')", 0, "write NOT ( ... ) around"),  # (NOT a) IN ...
    ("NOT a BETWEEN 1 AND 2", 0, "write NOT ( ... ) around"),  # (NOT a) BETWEEN ...
    ("NOT a > 1", 0, "write NOT ( ... ) around"),
    ("a = 'x' AND NOT", 15, "unexpected end of selector"),
    ("#", 0, "unexpected character '#'"),
    ("a = 1 -- comment\n AND", 21, "unexpected end of selector"),
]


@pytest.mark.parametrize("text,position,fragment", MALFORMED)
def test_malformed_selector(text: str, position: int, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        compile_selector(text)
    err = info.value
    assert err.position == position, str(err)
    assert fragment in str(err)
    assert f"at position {position} in" in str(err)
    assert "\n" not in str(err) and "\r" not in str(err)
    assert err.text == text
    assert isinstance(err, ValueError)


def test_message_points_at_fault_and_says_what_was_expected() -> None:
    with pytest.raises(SelectorError) as info:
        compile_selector("color = 'red' AND )")
    assert str(info.value) == (
        "selector: unexpected ')' at position 18 in \"color = 'red' AND )\";"
        " expected an identifier, a literal, NOT, '-' or '('"
    )
    assert info.value.expected == "an identifier, a literal, NOT, '-' or '('"


def test_message_of_a_long_selector_shows_a_window_around_the_fault() -> None:
    text = "a = 1 AND " * 100 + ")" + " OR b = 2" * 100
    with pytest.raises(SelectorError) as info:
        compile_selector(text)
    message = str(info.value)
    assert info.value.position == 1000
    assert len(message) < 300
    assert '"...a = 1 AND a = 1 AND a = 1 AND a = 1 AND ) OR b = 2 OR' in message


def test_control_characters_are_escaped_in_the_message() -> None:
    with pytest.raises(SelectorError) as info:
        compile_selector("a = 'x\"y'\r\n\t\x01 #")
    assert "\\r\\n\\t\\x01 #" in str(info.value)
    assert '\\"' in str(info.value)


def test_length_limit() -> None:
    text = "a = 'x'" + " " * DEFAULT_MAX_LENGTH
    with pytest.raises(SelectorError) as info:
        compile_selector(text)
    assert info.value.position == DEFAULT_MAX_LENGTH
    assert f"limit of {DEFAULT_MAX_LENGTH}" in str(info.value)
    with pytest.raises(SelectorError):
        compile_selector("a = 12", max_length=5)
    assert compile_selector("a = 12", max_length=6).matches({"a": "12"})


def _nested(kind: str, n: int) -> str:
    """Selectors n levels deep in various ways."""
    if kind == "parens":
        return "(" * n + "a = 1" + ")" * n
    if kind == "not":
        return "NOT " * n + "a"
    if kind == "minus":
        return "- " * n + "a > 1"
    if kind == "plus":
        return "+ " * n + "a > 1"
    if kind == "sum":
        return "a" + " + a" * n + " > 1"
    if kind == "equal":
        return "a = 'x'" + " = TRUE" * n
    if kind == "not-parens":
        return "NOT (" * n + "a = 1" + ")" * n
    if kind == "value-logic":  # ((a OR b) = TRUE) nested: the lambda path
        text = "a = 1"
        for _ in range(n):
            text = f"(({text}) OR b = 2) = TRUE"
        return text
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["parens", "not", "minus", "plus", "sum", "equal", "not-parens", "value-logic"])
def test_nesting_limit_is_an_error_not_a_crash(kind: str) -> None:
    deepest = 0
    for n in range(1, 400):
        try:
            sel = compile_selector(_nested(kind, n))
        except SelectorError as err:
            assert "nested deeper than" in str(err)
            break
        deepest = n
        sel.evaluate({"a": "1", "b": "2"})
        sel.matches({"a": "1", "b": "2"})
    else:
        raise AssertionError(f"{kind}: never refused")
    assert deepest >= DEFAULT_MAX_DEPTH // 4, f"{kind}: refused already at {deepest + 1}"


def test_huge_chains_within_the_length_limit_are_refused_cleanly() -> None:
    for text in ["a" + " + a" * 1000 + " > 1", "(" * 2000 + "a" + ")" * 2000, "-" * 4000 + "1"]:
        with pytest.raises(SelectorError):
            compile_selector(text[:DEFAULT_MAX_LENGTH])


def test_long_flat_and_or_chains_are_fine() -> None:
    text = " OR ".join(f"a='{i}'" for i in range(380))
    assert len(text) <= DEFAULT_MAX_LENGTH
    sel = compile_selector(text)
    assert sel.matches({"a": "379"}) and not sel.matches({"a": "380"})


@pytest.mark.parametrize(
    "text,expected",
    [
        ("NOT a = 1", "NOT at position 0 applies only"),
        ("b = 2 AND NOT a LIKE 'x%'", "NOT at position 10 applies only"),
        ("NOT a IS NULL", "applies only"),
        ("TRUE = a", "put the header on the left"),
        ("a = 1 --note", "'--' at position 6 is not a comment"),
    ],
)
def test_warnings(text: str, expected: str) -> None:
    warnings = compile_selector(text).warnings
    assert any(expected in w for w in warnings), warnings


@pytest.mark.parametrize("text", ["NOT (a = 1)", "(NOT a) = TRUE", "a = TRUE", "a = 1 -- note\n", "a = 1 /* -- */"])
def test_no_warnings(text: str) -> None:
    assert compile_selector(text).warnings == ()


def test_compiled_selectors_are_cached_by_text_and_limits() -> None:
    a = compile_selector("cached = 'yes'")
    assert compile_selector("cached = 'yes'") is a
    assert compile_selector("cached = 'yes'", max_depth=10) is not a
    assert isinstance(a, Selector)
    assert a.text == "cached = 'yes'"
    assert repr(a) == "Selector(\"cached = 'yes'\")"


def test_non_string_selector_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        compile_selector(b"a = 1")  # type: ignore[arg-type]


def test_generated_code_contains_no_user_text() -> None:
    sel = compile_selector("evil = ''') or __import__(''os'') #' AND wicked LIKE 'x%'")
    for fragment in ("evil", "wicked", "import", "os", "x%"):
        assert fragment not in sel.source
    assert sel.matches({"evil": "') or __import__('os') #", "wicked": "xyz"})


def test_recursion_error_becomes_selector_error() -> None:
    text = "(" * 45 + "deep = 1" + ")" * 45  # within the limits, new to the cache
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)
    try:
        with pytest.raises(SelectorError) as info:
            compile_selector(text)
    finally:
        sys.setrecursionlimit(old)
    assert "too complex" in str(info.value)
    assert compile_selector(text).matches({"deep": "1"})
