"""Destination addresses: parsing, creation on first use, temporaries, rights.

Addresses a client may use:

- ``/queue/NAME`` and ``/topic/NAME``: created on first use, with the policy
  of the most specific matching ``[[destination_policy]]`` entry;
- RabbitMQ's ``/amq/queue/NAME`` (the queue NAME, which must exist),
  ``/exchange/amq.topic/KEY`` (the topic KEY) and ``/exchange/amq.fanout``
  (the topic ``amq.fanout``): see ``dialects.py``;
- ``/temp-queue/NAME`` and ``/temp-topic/NAME``: private to the connection
  that uses them, removed when it closes. Another connection cannot name
  them directly: when the owner sends a message with ``reply-to`` set to one
  of them, the broker rewrites it to ``/remote-temp-queue/<id>`` (as ActiveMQ
  does), an address only the owner may consume from, and another
  connection may send to with the right to (see ``security.py``).

Creating a destination needs the ``admin`` right, sending ``write`` and
consuming ``read`` (see ``security.py``); temporary destinations are always
open to their owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from minibroker.destinations.destination import Destination, parse_address
from minibroker.destinations.ports import DestinationParts
from minibroker.destinations.queue import Queue
from minibroker.destinations.topic import Topic
from minibroker.errors import ProtocolError
from minibroker.protocol import RABBITMQ_PREFIXES
from minibroker.protocol.dialects import rabbitmq_address

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.connection.security import Security
    from minibroker.connection.session import Session

__all__ = ["DestinationRegistry", "TEMP_PREFIXES", "REMOTE_TEMP_PREFIXES"]

#: Local temporary prefix -> (kind, the prefix other connections see).
TEMP_PREFIXES = {"/temp-queue/": ("queue", "/remote-temp-queue/"), "/temp-topic/": ("topic", "/remote-temp-topic/")}
#: Remote temporary prefix -> kind.
REMOTE_TEMP_PREFIXES = {"/remote-temp-queue/": "queue", "/remote-temp-topic/": "topic"}


class RegistryHost(DestinationParts, Protocol):
    """The broker as its registry sees it: what a new destination is given
    (``ports.DestinationParts``, a policy), the rights to check, and whom to tell
    of a destination created (``hooks``)."""

    @property
    def boot(self) -> str:
        """This broker run's token (in temporary destinations' names)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def security(self) -> Security: ...


class DestinationRegistry:
    """Every destination of one broker, by full address."""

    def __init__(self, broker: RegistryHost) -> None:
        self.broker = broker
        self.by_address: dict[str, Destination] = {}
        self._temporaries: dict[int, list[Destination]] = {}
        #: No ``[[authorization]]`` entries: a known queue or topic needs no rights checked
        #: (the configuration does not change while the broker runs).
        self._open = not broker.security.authorizes

    def __len__(self) -> int:
        return len(self.by_address)

    def values(self) -> list[Destination]:
        return list(self.by_address.values())

    def get(self, address: str) -> Destination | None:
        return self.by_address.get(address)

    # -- temporaries
    def _temp_address(self, session: Session, address: str) -> tuple[str, str, str] | None:
        """For ``/temp-queue/x`` used by ``session``: (kind, name, remote address)."""
        for prefix, (kind, remote) in TEMP_PREFIXES.items():
            if address.startswith(prefix) and len(address) > len(prefix):
                name = f"{self.broker.boot}.{session.id}.{address[len(prefix) :]}"
                return kind, name, remote + name
        return None

    def remove_temporaries(self, session_id: int) -> list[Destination]:
        """Drop the temporary destinations of a closed connection."""
        removed = self._temporaries.pop(session_id, [])
        for dest in removed:
            self.by_address.pop(dest.address, None)
        return removed

    def remove(self, destination: Destination) -> None:
        """Forget a deleted destination: its address names a new one from now on."""
        self.by_address.pop(destination.address, None)

    # -- resolution
    def resolve(self, session: Session, address: str, right: str) -> Destination:
        """The destination ``session`` means by ``address``, created if allowed.

        ``right`` is "read" (consume) or "write" (send).
        """
        found = self.by_address.get(address)
        if found is not None and found.owner is None and self._open:
            return found  # the hot path: a known queue or topic, no rights to check
        if address.startswith(RABBITMQ_PREFIXES):
            ours, must_exist = rabbitmq_address(address)
            if must_exist and ours not in self.by_address:
                name = ours[len("/queue/") :]
                raise ProtocolError(
                    f"NOT_FOUND - no queue {name!r}: {address} names an existing queue (/queue/{name} makes it)"
                )
            return self.resolve(session, ours, right)
        temp = self._temp_address(session, address)
        if temp is not None:
            kind, name, canonical = temp
            found = self.by_address.get(canonical)
            return found if found is not None else self._create(kind, name, canonical, owner=session.id)
        for prefix in REMOTE_TEMP_PREFIXES:
            if address.startswith(prefix):
                found = self.by_address.get(address)
                if found is None:
                    raise ProtocolError(f"temporary destination {address} does not exist (its connection has closed)")
                if found.owner != session.id:
                    if right == "read":
                        raise ProtocolError(f"only the connection that created {address} may consume from it")
                    self.broker.security.check_temp_write(session.principal, address)
                return found
        parsed = parse_address(address)
        if parsed is None:
            raise ProtocolError(
                f"unknown destination {address!r}: use /queue/NAME, /topic/NAME, /temp-queue/NAME or /temp-topic/NAME"
            )
        kind, name = parsed
        security = self.broker.security
        principal = session.principal
        security.check(principal, right, kind, name)
        if found is not None:
            return found
        security.check(principal, "admin", kind, name)
        return self._create(kind, name, address)

    def system_queue(self, name: str) -> Destination:
        """A broker-internal queue (a dead letter queue), created if needed."""
        address = f"/queue/{name}"
        found = self.by_address.get(address)
        return found if found is not None else self._create("queue", name, address)

    def _create(self, kind: str, name: str, address: str, owner: int | None = None) -> Destination:
        policy = self.broker.config.policy_for(kind, name)
        cls = Queue if kind == "queue" else Topic
        created = cls(self.broker, name, policy, address=address, owner=owner)
        self.by_address[address] = created
        if owner is not None:
            self._temporaries.setdefault(owner, []).append(created)
        self.broker.hooks.destination_created(created)
        return created
