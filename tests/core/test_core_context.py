"""The core's parts share one read-only context and are given their siblings, not the broker.

The ``Broker`` makes one ``CoreContext`` (its configuration, clock, timers, trace,
security, store, usages, registry, destinations, sessions) and hands it to every
part; a part that needs another is given it when it is made. So no part can
reach the broker's other state behind its declared arguments, and no part can
swap a shared service for the others.
"""

from __future__ import annotations

import pytest

from minibroker.config import parse_config
from minibroker.connection.clock import ManualClock
from minibroker.core import Broker
from minibroker.core.context import CoreContext

#: The parts the broker holds, by attribute.
PARTS = (
    "reading",
    "flow",
    "storehooks",
    "router",
    "handlers",
    "teardown",
    "hooks",
    "limits",
    "handshake",
    "sampling",
    "outbox",
)


def _broker() -> Broker:
    return Broker(parse_config({}), ManualClock())


def test_the_context_holds_the_brokers_own_services() -> None:
    broker = _broker()
    context = broker.context
    for name in ("config", "clock", "timers", "trace", "security", "store", "memory", "store_usage", "temp_usage"):
        assert getattr(context, name) is getattr(broker, name), name
    assert context.registry is broker.registry
    assert context.destinations is broker.registry.by_address
    assert context.sessions is broker.sessions
    assert context.session_tag(7) == broker.session_tag(7) == f"{broker.name}-{broker.boot}-7"


def test_the_context_cannot_be_changed() -> None:
    context = _broker().context
    with pytest.raises(AttributeError):
        context.clock = ManualClock()  # type: ignore[misc]
    assert isinstance(context, CoreContext)


def test_every_part_that_keeps_a_context_keeps_the_one_context() -> None:
    broker = _broker()
    kept = {name: getattr(broker, name).context for name in PARTS if hasattr(getattr(broker, name), "context")}
    assert set(kept) >= {"flow", "storehooks", "handlers", "hooks", "handshake", "sampling"}
    assert all(context is broker.context for context in kept.values())


def test_no_part_holds_the_broker() -> None:
    """A part knows its context, its siblings and the callables it was given: the
    broker's other state is out of its reach (its tools' host aside: statistics and
    admin requests read the whole broker)."""
    broker = _broker()
    holding = sorted(
        f"{name}.{attribute}"
        for name in PARTS
        for attribute in dir(getattr(broker, name))  # (a compiled part has no ``__dict__``)
        if not attribute.startswith("__") and getattr(getattr(broker, name), attribute) is broker
    )
    assert holding == []
    assert broker.handlers.tools.host is broker


def test_siblings_are_the_brokers_parts() -> None:
    broker = _broker()
    assert broker.storehooks.flow is broker.flow
    assert broker.router.storehooks is broker.storehooks
    assert broker.handlers.flow is broker.flow and broker.handlers.storehooks is broker.storehooks
    assert broker.teardown.flow is broker.flow and broker.teardown.storehooks is broker.storehooks
    assert broker.hooks.storehooks is broker.storehooks
    assert broker.outbox.flow is broker.flow and broker.outbox.storehooks is broker.storehooks
