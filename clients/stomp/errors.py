"""What the STOMP client raises on purpose.

``StompClientError`` is the root. A waiting call (``connect``, a ``send`` with
a receipt, ``Subscription.get``) fails with exactly one of these, or with the
built-in ``TimeoutError`` when its own ``timeout`` runs out:

- ``CannotConnect``: no STOMP session was opened (refused, unresolvable,
  timed out before CONNECTED).
- ``StompError``: the broker sent an ERROR frame; ``.message`` is its
  ``message`` header. Once the broker closes after it (as the spec requires),
  every later wait on that client raises the same ``StompError``, so the
  reason a connection died is never replaced by a vaguer one.
- ``ConnectionLost``: the connection closed without an ERROR, a heart-beat
  went missing, or the broker sent bytes STOMP does not allow.
- ``SubscriptionClosed``: the subscription was unsubscribed or the client
  disconnected on purpose; ``async for`` turns it into the end of iteration.
"""

from __future__ import annotations

from collections.abc import Mapping

from minibroker.frames import Frame

__all__ = [
    "StompClientError",
    "CannotConnect",
    "StompError",
    "ConnectionLost",
    "SubscriptionClosed",
]


class StompClientError(Exception):
    """Root of the errors the STOMP client raises on purpose."""


class CannotConnect(StompClientError):
    """The TCP connection or the STOMP handshake could not be made."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot connect to {host}:{port}: {reason}")
        self.host = host
        self.port = port
        self.reason = reason


class StompError(StompClientError):
    """The broker sent an ERROR frame.

    ``message`` is the frame's ``message`` header (empty when absent),
    ``headers`` and ``body`` are the frame's own, ``frame`` the whole frame.
    """

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.headers: Mapping[str, str] = frame.headers
        self.body: bytes = frame.body
        self.message: str = frame.headers.get("message", "")
        text = self.message or self.body.decode("utf-8", "replace").strip()[:200]
        super().__init__(text or "ERROR frame without a message")

    @property
    def receipt_id(self) -> str | None:
        """The ``receipt-id`` of the frame that caused the error, if any."""
        return self.headers.get("receipt-id")


class ConnectionLost(StompClientError):
    """The connection ended without an ERROR frame; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SubscriptionClosed(StompClientError):
    """The subscription ended on purpose (unsubscribe or disconnect)."""
