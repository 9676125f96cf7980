"""Received messages, and the headers that acknowledge one in each version.

A ``Message`` wraps the MESSAGE frame as it came off the wire (frames are
immutable) plus the id of the subscription it was routed to, which a STOMP 1.0
broker may leave out of the frame. Every attribute is read from the headers
on demand, so receiving costs one small object per message.

What identifies a message in ACK and NACK differs by version (STOMP 1.0, 1.1
and 1.2 specs; ActiveMQ's ``StompSubscription`` reads the same headers):

=========  ==============================================
version    ACK / NACK headers
=========  ==============================================
1.2        ``id`` = the MESSAGE's ``ack`` header
1.1        ``subscription`` and ``message-id``
1.0        ``message-id`` (NACK does not exist in 1.0)
=========  ==============================================
"""

from __future__ import annotations

from collections.abc import Mapping

from minibroker.frames import Frame

__all__ = ["Message", "ack_headers"]


class Message:
    """One MESSAGE frame received on a subscription."""

    __slots__ = ("frame", "subscription")

    def __init__(self, frame: Frame, subscription: str) -> None:
        #: The MESSAGE frame, unchanged.
        self.frame = frame
        #: Id of the subscription the message was delivered to.
        self.subscription = subscription

    @property
    def headers(self) -> Mapping[str, str]:
        """The MESSAGE frame's headers."""
        return self.frame.headers

    @property
    def body(self) -> bytes:
        """The body, as bytes."""
        return self.frame.body

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.frame.body.decode("utf-8", "replace")

    @property
    def message_id(self) -> str:
        """The broker's ``message-id`` ('' when absent)."""
        return self.frame.headers.get("message-id", "")

    @property
    def ack_id(self) -> str:
        """What a 1.2 ACK/NACK quotes: the ``ack`` header, else ``message-id``.

        A 1.2 broker sends ``ack`` only in the client ack modes; falling back
        to ``message-id`` lets an ACK of an auto-mode message reach the broker
        and be judged there rather than be invented here.
        """
        headers = self.frame.headers
        return headers.get("ack") or headers.get("message-id", "")

    @property
    def destination(self) -> str:
        """The ``destination`` header ('' when absent)."""
        return self.frame.headers.get("destination", "")

    @property
    def redelivered(self) -> bool:
        """True when the broker flagged the message ``redelivered:true``."""
        return self.frame.headers.get("redelivered") == "true"

    def __repr__(self) -> str:
        return (
            f"Message(subscription={self.subscription!r}, "
            f"message_id={self.message_id!r}, body={self.frame.body[:40]!r})"
        )


def ack_headers(message: Message, version: str, transaction: str | None = None) -> dict[str, str]:
    """The headers of an ACK or NACK of ``message`` in STOMP ``version``."""
    if version == "1.2":
        headers = {"id": message.ack_id}
    elif version == "1.1":
        headers = {"subscription": message.subscription, "message-id": message.message_id}
    else:
        headers = {"message-id": message.message_id}
    if transaction is not None:
        headers["transaction"] = transaction
    return headers
