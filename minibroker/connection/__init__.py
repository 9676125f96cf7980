"""One client's connection: its session, the state tables of reading, writing,
producing and synchronous waits, who it is (security, logins), and the clock and
timers every part reads."""

from __future__ import annotations

from minibroker.connection.clock import Clock, ManualClock, SystemClock
from minibroker.connection.logins import LoginFailures, host_of
from minibroker.connection.security import ANONYMOUS, Principal, Security, hash_password, verify_password
from minibroker.connection.session import Session, State, negotiate_heart_beat, negotiate_version, parse_heart_beat
from minibroker.connection.states import (
    PRODUCE_TRANSITIONS,
    READ_TRANSITIONS,
    SYNC_TRANSITIONS,
    WRITE_TRANSITIONS,
    IllegalTransition,
    ProduceEvent,
    ProduceState,
    Producing,
    ReadEvent,
    Reading,
    ReadState,
    SyncEvent,
    SyncState,
    SyncWait,
    WriteEvent,
    WriteState,
    Writing,
)
from minibroker.connection.timers import Timers

__all__ = [
    "ANONYMOUS",
    "Clock",
    "IllegalTransition",
    "LoginFailures",
    "ManualClock",
    "PRODUCE_TRANSITIONS",
    "Principal",
    "ProduceEvent",
    "ProduceState",
    "Producing",
    "READ_TRANSITIONS",
    "ReadEvent",
    "ReadState",
    "Reading",
    "SYNC_TRANSITIONS",
    "Security",
    "Session",
    "State",
    "SyncEvent",
    "SyncState",
    "SyncWait",
    "SystemClock",
    "Timers",
    "WRITE_TRANSITIONS",
    "WriteEvent",
    "WriteState",
    "Writing",
    "hash_password",
    "host_of",
    "negotiate_heart_beat",
    "negotiate_version",
    "parse_heart_beat",
    "verify_password",
]
