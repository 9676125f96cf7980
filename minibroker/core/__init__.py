"""The sans-IO core: the ``Broker`` that takes events and produces actions, the
frame handlers, producer flow control, the hooks on the store and the usages, the
teardown of a connection, the one wrapper of each entry point (an event that
settles the outbox, and fail-stop), and the invariants checked after every end."""

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
from minibroker.core.invariants import TeardownChecker
from minibroker.core.outbox import is_entry_point
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
    "is_entry_point",
]
