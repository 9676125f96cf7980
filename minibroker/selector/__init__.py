"""JMS message selectors for STOMP subscriptions, as ActiveMQ Classic runs them.

A STOMP SUBSCRIBE may carry a ``selector`` header: an SQL-92-like condition
on the message's headers.  Only messages for which it is TRUE are delivered
to that subscription::

    from minibroker.selector import compile_selector, SelectorError

    sel = compile_selector("color = 'red' AND weight > 2.5")
    sel.matches({"color": "red", "weight": "3"})    # True
    sel.evaluate({"weight": "3"})                   # None (color is NULL)
    compile_selector("color = 'red' AND )")         # SelectorError, .position 18

Theory of operation
-------------------
``text -> lexer -> parser -> tree -> codegen -> two Python functions``.

- ``lexer``: tokens exactly as ActiveMQ's JavaCC grammar defines them.
- ``parser``: ActiveMQ's grammar and precedence (``NOT`` binds tightest;
  ``=``/``<>`` bind looser than ``<``, LIKE, IN, BETWEEN) and its
  compile-time checks; bounded length and nesting; positions in errors.
- ``headers``: which STOMP header an identifier reads, including the JMS
  header names (JMSPriority, JMSType, ...) and the headers ActiveMQ hides.
- ``values`` and ``like``: the run-time rules (three-valued logic, string to
  number conversion as ActiveMQ's STOMP connector does it, Java arithmetic).
- ``codegen``: compiles the tree into ``matches`` (is it TRUE?) and
  ``evaluate`` (TRUE, FALSE or None), generated from the tree alone.
- ``api``: ``compile_selector`` with an LRU cache, and ``Selector``.

Every module cites the ActiveMQ source it follows; where we differ from
ActiveMQ, the module docstring says so and why.  The package imports nothing
outside the standard library.
"""

from .api import DEFAULT_MAX_DEPTH, DEFAULT_MAX_LENGTH, Selector, compile_selector
from .errors import SelectorError

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_LENGTH",
    "Selector",
    "SelectorError",
    "compile_selector",
]
