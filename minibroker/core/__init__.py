"""The sans-IO core: the ``Broker`` that takes events and produces actions, the
frame handlers, producer flow control, the hooks on the store and the usages, the
teardown of a connection, the outbox and fail-stop that wrap each entry point,
and the invariants checked after every end."""

from __future__ import annotations

from minibroker.core.actions import (
    Action,
    CheckLogin,
    Close,
    PauseReading,
    ResumeReading,
    Shutdown,
    Sync,
    Write,
    WriteFrames,
)
from minibroker.core.broker import Broker
from minibroker.core.failstop import is_fail_stop
from minibroker.core.invariants import TeardownChecker
from minibroker.core.storehooks import STORE_FAILED_EXIT

__all__ = [
    "Action",
    "Broker",
    "CheckLogin",
    "Close",
    "PauseReading",
    "ResumeReading",
    "STORE_FAILED_EXIT",
    "Shutdown",
    "Sync",
    "TeardownChecker",
    "Write",
    "WriteFrames",
    "is_fail_stop",
]
