"""One SparkSession for the whole Spark suite: local[1] with the fast test settings."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from clients.spark.session import TEST_CONF, get_session

    session = get_session("minibroker-tests", master="local[1]", conf=TEST_CONF)
    yield session
    session.stop()
