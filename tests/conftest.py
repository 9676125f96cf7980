"""Shared fixtures: a real broker on a real socket, in a background thread."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from broker_support import RunningBroker
from minibroker.config import BrokerConfig
from minibroker.sim import VirtualNetwork

# Every core test checks every connection's end: a close that leaves a subscription, an
# unacknowledged message, a transaction or a temporary destination behind fails the test
# where it happens (minibroker.invariants).
VirtualNetwork.strict_teardown_checks = True


#: Session fixtures made once for the tests that share them (an analysis each).
_SHARED_SESSION_FIXTURES = {"pathology_analysis": "pathologies", "pathology_inprocess": "pathologies"}


def _worker_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group of a test whose costly fixture is shared, or None.

    ``make test`` runs the suite on several workers (``--dist loadgroup``); a fixture of
    module or session scope is made once per worker that runs a test needing it. So the
    tests that share one run on one worker: a module's tests when it has a module-scoped
    fixture, the lab findings' tests per lab (``lab_results`` runs each lab when first
    asked), the pathology analyses' tests together. The rest spread one by one."""
    names = getattr(item, "fixturenames", ())
    if "lab_results" in names:
        callspec = getattr(item, "callspec", None)
        lab = callspec.params.get("lab") if callspec is not None else None
        return f"lab-{lab.number}" if lab is not None else "lab-00"  # the lone tests look at lab 00
    for name in names:
        if name in _SHARED_SESSION_FIXTURES:
            return _SHARED_SESSION_FIXTURES[name]
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(defs and defs[-1].scope == "module" for defs in definitions.values()):
        return item.nodeid.split("::", 1)[0]
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    group = _worker_group(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def broker_factory() -> Iterator[Callable[..., RunningBroker]]:
    """Start brokers with configuration overrides: ``broker_factory(transport={...})``."""
    started: list[RunningBroker] = []

    def start(config: BrokerConfig | None = None, data_dir: str | None = None, **sections: Any) -> RunningBroker:
        cfg = (config or BrokerConfig()).replace(**sections)
        rb = RunningBroker(cfg, data_dir).start()
        started.append(rb)
        return rb

    yield start
    for rb in started:
        rb.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    """A broker with the default configuration on an ephemeral port."""
    return broker_factory()
