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
