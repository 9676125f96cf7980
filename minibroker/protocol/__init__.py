"""STOMP on the wire: the sans-IO codec (bytes in, frames out), the broker's message,
header values, and the dialects of other brokers' clients (RabbitMQ's headers and
destinations)."""

from __future__ import annotations

from minibroker.protocol.codec import (
    HEARTBEAT,
    FrameParser,
    decode_header_block,
    encode,
    encode_headers,
    escape,
    unescape,
)
from minibroker.protocol.dialects import (
    QUEUE_SUBSCRIBE_HONOURED,
    RABBITMQ_CLIENT_ID,
    RABBITMQ_PREFIXES,
    SUBSCRIBE_HONOURED,
    Unhonoured,
    rabbitmq_address,
    rabbitmq_durable,
    rabbitmq_prefetch,
)
from minibroker.protocol.headers import header_text, int_header, seq_of, shown
from minibroker.protocol.message import (
    BROKER_SET_HEADERS,
    MESSAGE_OVERHEAD,
    Message,
    message_id_from_wire,
    moved_copy,
    send_block,
)

__all__ = [
    "BROKER_SET_HEADERS",
    "FrameParser",
    "HEARTBEAT",
    "MESSAGE_OVERHEAD",
    "Message",
    "QUEUE_SUBSCRIBE_HONOURED",
    "RABBITMQ_CLIENT_ID",
    "RABBITMQ_PREFIXES",
    "SUBSCRIBE_HONOURED",
    "Unhonoured",
    "decode_header_block",
    "encode",
    "encode_headers",
    "escape",
    "header_text",
    "int_header",
    "message_id_from_wire",
    "moved_copy",
    "rabbitmq_address",
    "rabbitmq_durable",
    "rabbitmq_prefetch",
    "send_block",
    "seq_of",
    "shown",
    "unescape",
]
