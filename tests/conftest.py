"""Shared fixtures: a real broker on a real socket, in a background thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker_support import RunningBroker
from minibroker.config import BrokerConfig
from minibroker.edge import VirtualNetwork

# Every core test checks every connection's end: a close that leaves a subscription, an
# unacknowledged message, a transaction or a temporary destination behind fails the test
# where it happens (minibroker.core.invariants).
VirtualNetwork.strict_teardown_checks = True


#: Session fixtures made once for the tests that share them (an analysis each).
_SHARED_SESSION_FIXTURES = {"pathology_inprocess": "pathologies"}
#: The xdist group of every test that runs Spark: one worker, one JVM.
SPARK_GROUP = "spark"


def _runs_spark(item: pytest.Item) -> bool:
    """Whether ``item`` runs Spark: the ``spark`` session fixture is in its fixture
    closure (directly or through another fixture, such as an analysis made on it),
    or it is marked ``spark`` (it starts a Spark job, in this process or a child)."""
    return "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("spark") is not None


def _worker_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group of a test whose costly fixture is shared, or None.

    ``make test`` runs the suite on several workers (``--dist loadgroup``); a fixture of
    module or session scope is made once per worker that runs a test needing it. So the
    tests that share one run on one worker:

    - every test that runs Spark, whatever else it uses: the SparkSession (a JVM of a
      gigabyte) is made once, on one worker, and no other worker starts one;
    - the lab findings' tests per lab (``lab_results`` runs each lab when first asked);
    - the in-process pathology analysis' tests together;
    - a module's tests when it has a module-scoped fixture.

    The rest spread one by one."""
    if _runs_spark(item):
        return SPARK_GROUP
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


def pytest_sessionstart(session: pytest.Session) -> None:
    """A compiled core asked for (``MINIBROKER_CORE=compiled``, as ``make test`` asks
    where it built one) and not loaded stops the run before its first test, saying why."""
    from minibroker import corebuild

    missing = corebuild.requested_but_missing()
    if missing:
        pytest.exit(missing, returncode=1)


def pytest_itemcollected(item: pytest.Item) -> None:
    group = _worker_group(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tests first, and among them those that start Spark in a child process
    (``bench/spark_scale.py``) before the first that makes the shared SparkSession: the
    Spark worker's jobs then never run beside the session's JVM, and the longest group
    starts at once rather than last. The order is otherwise kept (a stable sort)."""

    def rank(item: pytest.Item) -> int:
        if not _runs_spark(item):
            return 2
        return 1 if "spark" in getattr(item, "fixturenames", ()) else 0

    items.sort(key=rank)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[1] SparkSession with the fast test settings for the whole run (the
    jobs' ``get_session`` finds it active and uses it); a test that takes it, directly
    or through a fixture, runs on the Spark worker (``_worker_group``)."""
    from pyspark.sql import SparkSession

    from clients.spark.session import TEST_CONF, get_session

    existing = SparkSession.getActiveSession()
    session = get_session("minibroker-tests", master="local[1]", conf=TEST_CONF)
    yield session
    if existing is None:
        session.stop()


@pytest.fixture(scope="session")
def lab_results(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Each lab run once in this process, when a test first asks for one of its runs
    (``tests/lab_support.py``); a lab's tests are on one worker (``_worker_group``)."""
    from lab_support import LabResults

    return LabResults(tmp_path_factory.mktemp("lab-results"))


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
