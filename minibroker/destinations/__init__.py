"""Where messages wait: queues and topics, their subscriptions and cursors, the
pending lists, the memory, store and temp usages, the registry of destinations,
and the offline durable subscribers."""

from __future__ import annotations

from minibroker.destinations.cursor import StoreIndex
from minibroker.destinations.destination import Destination, parse_address
from minibroker.destinations.durables import OfflineDurables
from minibroker.destinations.paged import PagedRef, StoreRun
from minibroker.destinations.pending import FilePending
from minibroker.destinations.ports import (
    DestinationEvents,
    DestinationHandle,
    DestinationParts,
    DestinationStore,
    DestinationView,
    DurableCopies,
    SpaceListener,
    Tracer,
)
from minibroker.destinations.queue import Queue
from minibroker.destinations.registry import TEMP_PREFIXES, DestinationRegistry
from minibroker.destinations.seqfifo import SeqFifo
from minibroker.destinations.subscription import ACK_MODES, Connection, SubscribedDestination, Subscription
from minibroker.destinations.topic import DurableState, Topic
from minibroker.destinations.usage import Usage

__all__ = [
    "ACK_MODES",
    "Connection",
    "Destination",
    "DestinationEvents",
    "DestinationHandle",
    "DestinationParts",
    "DestinationStore",
    "DestinationView",
    "DurableCopies",
    "SpaceListener",
    "DestinationRegistry",
    "DurableState",
    "FilePending",
    "OfflineDurables",
    "PagedRef",
    "Queue",
    "SeqFifo",
    "StoreIndex",
    "StoreRun",
    "SubscribedDestination",
    "Subscription",
    "TEMP_PREFIXES",
    "Topic",
    "Tracer",
    "Usage",
    "parse_address",
]
