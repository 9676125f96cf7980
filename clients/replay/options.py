"""How to replay: the command's options, read by the scheduler and by every client."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from clients.spark.actions import Action
from minibroker.frames import VERSIONS

__all__ = ["ReplayOptions", "RECEIPT_MODES"]

#: When sends wait for the broker's RECEIPT: never, for persistent messages
#: (as a JMS producer sends them synchronously), or always.
RECEIPT_MODES = ("never", "persistent", "always")


@dataclass
class ReplayOptions:
    """How to replay (the command's options)."""

    host: str = "127.0.0.1"
    port: int = 61613
    speed: float = 1.0  # > 1 runs faster than the table's clock
    versions: tuple[str, ...] = VERSIONS
    vhost: str | None = "localhost"
    login: str | None = None
    passcode: str | None = None
    heartbeat: tuple[int, int] = (0, 0)
    connect_timeout: float = 10.0
    timeout: float = 30.0  # for RECEIPTs and blocked writes
    client_id_prefix: str | None = None
    receipts: str = "never"  # RECEIPT_MODES
    max_clients: int = 1000  # connections open at once
    max_pending: int = 100_000  # rows waiting in clients before the scheduler stops reading
    broker_name: str | None = None  # the trace's ``broker``; default host:port

    def __post_init__(self) -> None:
        if not self.speed > 0 or math.isinf(self.speed):
            raise ValueError(f"speed must be a positive number, not {self.speed!r}")
        if self.receipts not in RECEIPT_MODES:
            raise ValueError(f"receipts must be one of {', '.join(RECEIPT_MODES)}")
        if self.max_clients < 1:
            raise ValueError("max_clients must be at least 1")

    def connect_options(self) -> dict[str, Any]:
        """``StompClient.connect``'s keyword arguments (all but the client id)."""
        return dict(
            versions=self.versions,
            vhost=self.vhost,
            login=self.login,
            passcode=self.passcode,
            heartbeat=self.heartbeat,
            connect_timeout=self.connect_timeout,
        )

    def wants_receipt(self, action: Action) -> bool:
        """Whether the send ``action`` waits for the broker's RECEIPT (``receipts``)."""
        mode = self.receipts
        return mode == "always" or (mode == "persistent" and bool(action.persistent))
