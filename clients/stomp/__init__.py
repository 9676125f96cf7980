"""An asyncio STOMP 1.0/1.1/1.2 client on minibroker's sans-IO codec.

    client = await StompClient.connect("127.0.0.1", 61613, heartbeat=(1000, 1000))
    await client.send("/queue/a", "hello", receipt=True)
    sub = await client.subscribe("/queue/a", ack="client-individual", prefetch=10)
    msg = await sub.get(timeout=5)
    await client.ack(msg)
    await client.disconnect()

Modules: ``client`` (the connection), ``subscription`` (a subscription's
messages), ``flow`` (the read side's flow credit), ``transaction``,
``message`` (received messages, ACK headers per version), ``heartbeat``
(negotiation and timers), ``transport`` (opening the socket, timed waits),
``errors``.
"""

from .client import ACK_MODES, DEFAULT_PORT, StompClient
from .errors import CannotConnect, ConnectionLost, StompClientError, StompError, SubscriptionClosed
from .heartbeat import negotiate as negotiate_heartbeat
from .message import Message, ack_headers
from .subscription import Subscription
from .transaction import Transaction

__all__ = [
    "StompClient",
    "Subscription",
    "Transaction",
    "Message",
    "ack_headers",
    "negotiate_heartbeat",
    "ACK_MODES",
    "DEFAULT_PORT",
    "StompClientError",
    "CannotConnect",
    "StompError",
    "ConnectionLost",
    "SubscriptionClosed",
]
