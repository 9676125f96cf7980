"""The STOMP dialects of other brokers: RabbitMQ's, as minibroker accepts it, and
the headers of either dialect minibroker does not honour.

minibroker speaks ActiveMQ's dialect (``activemq.*`` headers, ``/queue/`` and
``/topic/``). A RabbitMQ user's client code works unchanged where RabbitMQ's
names have a clear meaning here:

- the ``prefetch-count`` SUBSCRIBE header is the prefetch (0: no limit, as
  RabbitMQ's; here the highest prefetch);
- ``durable:true`` (or the older ``persistent:true``) on a topic subscription
  makes it durable, named by its ``id`` (required, as RabbitMQ requires it),
  not by a client-id: every consumer that subscribes with that id to that topic
  shares its messages (RabbitMQ's one queue per id and destination). Without
  ``auto-delete:false`` it is removed when its last consumer leaves, as
  RabbitMQ's auto-delete queue; ``UNSUBSCRIBE`` with ``durable:true`` removes it;
- ``requeue:false`` on a NACK drops or dead-letters the message (the
  destination's dead letter policy), not redelivered;
- ``/amq/queue/NAME`` is the existing queue NAME, ``/exchange/amq.topic/KEY``
  the topic KEY and ``/exchange/amq.fanout[/KEY]`` the topic ``amq.fanout``.

A header of another dialect that minibroker does not honour (an ``activemq.``
header it does not know, RabbitMQ's queue arguments) is named in the log once
per name (``Unhonoured``), not silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from minibroker.errors import ProtocolError

__all__ = [
    "MAX_PREFETCH",
    "QUEUE_SUBSCRIBE_HONOURED",
    "RABBITMQ_CLIENT_ID",
    "RABBITMQ_PREFIXES",
    "SUBSCRIBE_HONOURED",
    "Unhonoured",
    "rabbitmq_address",
    "rabbitmq_durable",
    "rabbitmq_prefetch",
]

log = logging.getLogger("minibroker.dialects")

#: The client-id under which RabbitMQ's durable subscriptions are kept: they are named
#: by their id alone, whichever connection makes them.
RABBITMQ_CLIENT_ID = "rabbitmq:stomp-subscription"
#: What RabbitMQ's destination names start with (ActiveMQ's never do).
RABBITMQ_PREFIXES = ("/amq/queue/", "/exchange/")
_TOPIC_EXCHANGE = "/exchange/amq.topic/"
_FANOUT_EXCHANGE = "/exchange/amq.fanout"
#: The highest prefetch a subscription may ask for (``activemq.prefetchSize``'s upper bound).
MAX_PREFETCH = 32767

#: The SUBSCRIBE headers minibroker acts on, of either dialect.
SUBSCRIBE_HONOURED = frozenset(
    {
        "destination",
        "id",
        "ack",
        "receipt",
        "selector",
        "browser",
        "activemq.prefetchSize",
        "activemq.priority",
        "activemq.noLocal",
        "activemq.exclusive",
        "activemq.subscriptionName",
        "prefetch-count",
        "durable",
        "persistent",
        "auto-delete",
    }
)
#: RabbitMQ's queue options, which make a topic subscription durable but mean nothing for a queue here.
_QUEUE_OPTIONS = frozenset({"durable", "persistent", "auto-delete"})
#: The SUBSCRIBE headers minibroker acts on for a queue.
QUEUE_SUBSCRIBE_HONOURED = SUBSCRIBE_HONOURED - _QUEUE_OPTIONS
#: RabbitMQ's SUBSCRIBE headers that minibroker does not act on (its queue arguments,
#: consumer options, exclusive queues; ``x-`` headers too).
_RABBITMQ_SUBSCRIBE = frozenset({"exclusive", "x-queue-name", "x-priority", "x-stream-offset"}) | _QUEUE_OPTIONS


def rabbitmq_address(address: str) -> tuple[str, bool]:
    """Our address for one of RabbitMQ's destinations (it starts with one of
    ``RABBITMQ_PREFIXES``), and whether it must exist already (``/amq/queue/``)."""
    if address.startswith("/amq/queue/") and len(address) > len("/amq/queue/"):
        return "/queue/" + address[len("/amq/queue/") :], True
    if address.startswith(_TOPIC_EXCHANGE) and len(address) > len(_TOPIC_EXCHANGE):
        return "/topic/" + address[len(_TOPIC_EXCHANGE) :], False
    if address == _FANOUT_EXCHANGE or address.startswith(_FANOUT_EXCHANGE + "/"):
        return "/topic/amq.fanout", False
    raise ProtocolError(
        f"unknown destination {address!r}: of RabbitMQ's destinations minibroker has /amq/queue/NAME "
        "(an existing queue), /exchange/amq.topic/KEY (the topic KEY) and /exchange/amq.fanout (the topic amq.fanout)"
    )


def rabbitmq_prefetch(text: str) -> int:
    """The prefetch ``prefetch-count:text`` asks for: 0 (RabbitMQ's "no limit") and
    anything above ``MAX_PREFETCH`` are ``MAX_PREFETCH``."""
    if not text.isascii() or not text.isdigit():
        raise ProtocolError(f"prefetch-count must be a whole number of messages (0: no limit), not {text!r}")
    count = int(text)
    return MAX_PREFETCH if count == 0 or count > MAX_PREFETCH else count


def _true(headers: Mapping[str, str], name: str) -> bool:
    return headers.get(name, "").lower() == "true"


def rabbitmq_durable(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """(durable, auto_delete) of a SUBSCRIBE the RabbitMQ way: ``durable:true`` or
    ``persistent:true``; removed with its last consumer unless ``auto-delete:false``."""
    durable = _true(headers, "durable") or _true(headers, "persistent")
    return durable, headers.get("auto-delete", "true").lower() != "false"


class Unhonoured:
    """Names each header of another dialect that minibroker does not honour, once per name."""

    def __init__(self) -> None:
        self.named: set[str] = set()

    def check(self, command: str, names: Iterable[str], honoured: frozenset[str]) -> None:
        """Log the headers among ``names`` (of a ``command`` frame) that belong to a
        dialect and are not in ``honoured``, each the first time it is seen."""
        for name in names:
            if name in honoured or name in self.named:
                continue
            dialect = _dialect(name)
            if dialect is None:
                continue
            self.named.add(name)
            log.warning(
                "%s header %r (%s) is not honoured by minibroker: ignored (docs/clients.md lists what is)",
                command,
                name,
                dialect,
            )


def _dialect(name: str) -> str | None:
    """Whose header ``name`` is: "ActiveMQ", "RabbitMQ", or None (an application's)."""
    if name.startswith("activemq."):
        return "ActiveMQ"
    if name.startswith("x-") or name in _RABBITMQ_SUBSCRIBE:
        return "RabbitMQ"
    return None
