"""What operators ask of a running broker: statistics, rates, the diagnosis of
resource pressure, and the admin operations (purge, move, delete, close)."""

from __future__ import annotations

from minibroker.ops.admin import ADMIN_PREFIX, AdminHost, is_admin_address, perform
from minibroker.ops.diagnosis import diagnose
from minibroker.ops.rates import SAMPLE_PERIOD, RateMeter
from minibroker.ops.stats import (
    STATISTICS_PREFIX,
    BrokerView,
    Scope,
    StatisticsSource,
    broker_statistics,
    destination_statistics,
    is_statistics_address,
    statistics_replies,
)

__all__ = [
    "ADMIN_PREFIX",
    "AdminHost",
    "BrokerView",
    "RateMeter",
    "SAMPLE_PERIOD",
    "STATISTICS_PREFIX",
    "Scope",
    "StatisticsSource",
    "broker_statistics",
    "destination_statistics",
    "diagnose",
    "is_admin_address",
    "is_statistics_address",
    "perform",
    "statistics_replies",
]
