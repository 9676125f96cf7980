"""``compile_selector`` and the compiled ``Selector``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache

from .codegen import compile_tree
from .errors import SelectorError
from .nodes import Value
from .parser import parse

__all__ = ["DEFAULT_MAX_DEPTH", "DEFAULT_MAX_LENGTH", "Selector", "compile_selector"]

DEFAULT_MAX_LENGTH = 4096
"""Longest selector accepted, in characters (ActiveMQ has no limit of its own
but refuses STOMP header lines over 10240 bytes)."""

DEFAULT_MAX_DEPTH = 50
"""Deepest nesting accepted: parentheses, prefix operators and the depth of
the expression tree (a chain ``a+a+...+a`` of n terms is n deep)."""

CACHE_SIZE = 512


class Selector:
    """A compiled JMS message selector.

    Attributes:
        text: the selector as given.
        warnings: notes about constructs that are valid but almost certainly
            not what was meant under ActiveMQ's rules (e.g. ``NOT a = 1``,
            which means ``(NOT a) = 1``).  The broker may log them.
        matches: ``matches(headers) -> bool``; True only when the selector is
            TRUE for a message with these STOMP headers (``Mapping[str, str]``;
            NULL/unknown and FALSE both mean no match).
        evaluate: ``evaluate(headers) -> bool | None``; the three-valued
            result (None for unknown, also when ActiveMQ's evaluation would
            fail on this message).
        source: the generated Python source, for the curious.

    ``matches`` and ``evaluate`` are the generated functions themselves (no
    method call in between): they are called for every message and consumer.
    """

    __slots__ = ("text", "warnings", "matches", "evaluate", "source")

    text: str
    warnings: tuple[str, ...]
    matches: Callable[[Mapping[str, str]], bool]
    evaluate: Callable[[Mapping[str, str]], Value]
    source: str

    def __init__(
        self,
        text: str,
        warnings: tuple[str, ...],
        matches: Callable[[Mapping[str, str]], bool],
        evaluate: Callable[[Mapping[str, str]], Value],
        source: str,
    ) -> None:
        self.text = text
        self.warnings = warnings
        self.matches = matches
        self.evaluate = evaluate
        self.source = source

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def compile_selector(
    text: str, *, max_length: int = DEFAULT_MAX_LENGTH, max_depth: int = DEFAULT_MAX_DEPTH
) -> Selector:
    """Compile the text of a STOMP ``selector`` header.

    Compiled selectors are cached by (text, limits) in an LRU of
    ``CACHE_SIZE`` entries, so many subscriptions with one selector share one
    ``Selector``.  An empty or blank selector is an error, as in ActiveMQ;
    a SUBSCRIBE without the header simply has no selector.

    Raises:
        SelectorError: malformed text, or over ``max_length`` characters or
            ``max_depth`` levels of nesting.
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"selector must be a str, not {type(text).__name__}")
    return _compile_cached(text, max_length, max_depth)


@lru_cache(maxsize=CACHE_SIZE)
def _compile_cached(text: str, max_length: int, max_depth: int) -> Selector:
    if len(text) > max_length:
        raise SelectorError(
            f"selector is {len(text)} characters long, more than the limit of {max_length}",
            max_length,
            text,
        )
    try:
        root, warnings = parse(text, max_depth)
        matches, evaluate, source = compile_tree(root)
    except (RecursionError, MemoryError) as exc:  # a safety net: the limits should prevent it
        raise SelectorError("selector is too complex", 0, text) from exc
    return Selector(text, tuple(warnings), matches, evaluate, source)
