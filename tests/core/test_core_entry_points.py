"""Every method of the core that an edge calls is an entry point (``outbox.entry_point``).

A store that fails bringing a message back from disk can do so in almost any
event (``outbox.py``); an entry point left unwrapped lets ``StoreFailed``
escape to the edge, where the real server's asyncio callbacks only log it and
the broker goes on. The edges' calls are found in their source, so a new call
to an unwrapped method fails here.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import minibroker
from minibroker.core import Broker, is_entry_point
from minibroker.core.outbox import Outbox

#: The modules that drive the core from outside.
_EDGES = ("edge/connection.py", "edge/server.py", "edge/websocket.py", "edge/virtual.py")

#: Methods the edges call that are not wrapped, and why none of them can meet a failing store.
_NOT_WRAPPED = {
    "take_actions": "a pure drain: the work is done at each event's end, in _finish, which is wrapped (checked below)",
    "turn": "returns the turn; its end's work is _finish, which is wrapped (checked below)",
    "next_deadline": "reads the timers",
    "session_tag": "formats a name",
    "recover": "at start: a failure refuses to start the broker (serve exits non-zero)",
    "close": "stopping: the journals are closed",
    "report_buffered": "sets a number for statistics; reads no store",
}


def _called_on_the_broker(source: str) -> set[str]:
    """Names of the methods called as ``<...>.broker.NAME(...)`` or ``broker.NAME(...)``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if owner_name == "broker":
                names.add(node.func.attr)
    return names


def _entry_points() -> set[str]:
    package = Path(minibroker.__file__).parent
    called = set().union(*(_called_on_the_broker((package / name).read_text()) for name in _EDGES))
    # a routine: a function, or a compiled class's method (a method descriptor)
    return {name for name in called if inspect.isroutine(getattr(Broker, name, None))}


def test_the_edges_call_the_entry_points_this_test_knows() -> None:
    found = _entry_points()
    # The scan itself works: the busiest entry points are among what it finds.
    assert {"receive_data", "tick", "take_actions", "connection_lost", "set_writable"} <= found
    assert {"login_checked", "store_synced", "store_failed"} <= found


def test_every_entry_point_the_edges_call_turns_a_failed_store_into_fail_stop() -> None:
    unwrapped = {name for name in _entry_points() if not is_entry_point(getattr(Broker, name))}
    assert unwrapped <= set(_NOT_WRAPPED), f"make these outbox.entry_point: {sorted(unwrapped - set(_NOT_WRAPPED))}"
    assert is_entry_point(Outbox._finish)
