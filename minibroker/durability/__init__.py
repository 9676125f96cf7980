"""What the broker keeps on disk: the message store over ``storage/`` (journal
records of messages and acknowledgements), the journal directories, the ring
journal's cost model."""

from __future__ import annotations

from minibroker.durability.journaldirs import directory_name
from minibroker.durability.persistence import (
    MessageStore,
    StoreRef,
    decode_messages,
    decode_meta,
    decode_payload,
    durable_key,
    encode_payload,
    encode_wire_payload,
)
from minibroker.durability.ringcost import size_text

__all__ = [
    "MessageStore",
    "StoreRef",
    "decode_messages",
    "decode_meta",
    "decode_payload",
    "directory_name",
    "durable_key",
    "encode_payload",
    "encode_wire_payload",
    "size_text",
]
