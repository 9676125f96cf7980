"""What an identifier in a selector reads from a STOMP message's headers.

Theory of operation
-------------------
ActiveMQ turns a STOMP SEND into a JMS message in
``FrameTranslator.Helper.copyStandardHeadersFromFrameToMessage``
(activemq-stomp/.../transport/stomp/FrameTranslator.java): the standard
headers are *consumed* into JMS header fields (``priority`` becomes
JMSPriority, ``type`` becomes JMSType, ...) and every other header becomes a
string message property.  A selector then reads JMS header fields by their
JMS names (``PropertyExpression``, activemq-client/.../filter/) and message
properties by their own names.  So, for a STOMP client of ActiveMQ:

- ``JMSPriority > 4`` works, but ``priority > 4`` is always NULL: ``priority``
  is no longer a property once ActiveMQ consumed it.  The same holds for the
  other consumed headers that an identifier could name (``HIDDEN_HEADERS``).
- every other header is a string property: ``color = 'red'`` reads the
  ``color`` header;
- headers whose names are not identifiers (``content-type``, ``x-id``,
  ``activemq.foo``) cannot be named at all (see ``lexer``).

``resolve(name)`` returns what an identifier reads: a header key (a plain
property), a function of the headers (a JMS header), or ``None`` (always
NULL).  The JMS header values follow ``PropertyExpression``:

==================  =====================================  ==================
identifier          STOMP source                            when absent
==================  =====================================  ==================
JMSDestination      ``original-destination`` or             NULL
                    ``destination``: ``/queue/q`` reads
                    ``queue://q`` (ActiveMQDestination's
                    string form), ``/topic/t`` reads
                    ``topic://t``, temp destinations
                    ``temp-queue://...``/``temp-topic://...``
JMSReplyTo          ``reply-to``, converted the same way   NULL
JMSType             ``type``                                NULL
JMSDeliveryMode     'PERSISTENT' if ``persistent:true``     'NON_PERSISTENT'
                    else 'NON_PERSISTENT'
JMSPriority         ``priority`` as an integer              4
JMSMessageID        ``message-id``                          NULL
JMSTimestamp        ``timestamp`` as an integer             NULL
JMSCorrelationID    ``correlation-id``                      NULL
JMSExpiration       ``expires`` as an integer               0
JMSRedelivered      ``redelivered`` = 'true' (a boolean)     FALSE
JMSXGroupID         ``JMSXGroupID``                         NULL
JMSXGroupSeq        ``JMSXGroupSeq`` as an integer          0
JMSXUserID          ``JMSXUserID``                          NULL
==================  =====================================  ==================

A numeric header that is not an integer reads NULL (ActiveMQ would have
refused the SEND).  The broker stamps ``message-id`` and ``timestamp`` and
sets ``redelivered``; this module only reads them.  ActiveMQ's other
JMS-style names with no STOMP source here (JMSXDeliveryCount,
JMSXProducerTXID, JMSActiveMQBrokerInTime/OutTime/Path,
JMSXGroupFirstForConsumer) always read NULL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .nodes import Value
from .values import BAD, parse_long

__all__ = ["HIDDEN_HEADERS", "JMS_HEADERS", "Getter", "resolve"]

Getter = Callable[[Mapping[str, str]], Value]

# STOMP headers that ActiveMQ consumes before the rest become properties and
# whose names could be written as identifiers.  (It also consumes
# correlation-id, reply-to, message-id and content-length, which no
# identifier can name anyway.)
HIDDEN_HEADERS = frozenset(
    [
        "destination",
        "expires",
        "timestamp",
        "priority",
        "type",
        "persistent",
        "receipt",
        "redelivered",
        "subscription",
        "transaction",
    ]
)

_UNSUPPORTED = frozenset(
    [
        "JMSXDeliveryCount",
        "JMSXProducerTXID",
        "JMSActiveMQBrokerInTime",
        "JMSActiveMQBrokerOutTime",
        "JMSActiveMQBrokerPath",
        "JMSXGroupFirstForConsumer",
    ]
)

_DESTINATION_PREFIXES = (
    ("/queue/", "queue://"),
    ("/topic/", "topic://"),
    ("/temp-queue/", "temp-queue://"),
    ("/temp-topic/", "temp-topic://"),
    ("/remote-temp-queue/", "temp-queue://"),
    ("/remote-temp-topic/", "temp-topic://"),
)


def _destination(name: str | None) -> str | None:
    """A STOMP destination as ActiveMQDestination.toString() prints it."""
    if name is None:
        return None
    trimmed = name.strip()
    for prefix, scheme in _DESTINATION_PREFIXES:
        if trimmed.startswith(prefix):
            return scheme + trimmed[len(prefix) :]
    return name


def _integer(headers: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = headers.get(key)
    if raw is None:
        return default
    value = parse_long(raw)
    return None if value is BAD else value  # type: ignore[return-value]


def _jms_destination(h: Mapping[str, str]) -> Value:
    original = h.get("original-destination")
    return _destination(original if original is not None else h.get("destination"))


JMS_HEADERS: dict[str, Getter] = {
    "JMSDestination": _jms_destination,
    "JMSReplyTo": lambda h: _destination(h.get("reply-to")),
    "JMSType": lambda h: h.get("type"),
    "JMSDeliveryMode": lambda h: "PERSISTENT" if h.get("persistent") == "true" else "NON_PERSISTENT",
    "JMSPriority": lambda h: _integer(h, "priority", 4),
    "JMSMessageID": lambda h: h.get("message-id"),
    "JMSTimestamp": lambda h: _integer(h, "timestamp", None),
    "JMSCorrelationID": lambda h: h.get("correlation-id"),
    "JMSExpiration": lambda h: _integer(h, "expires", 0),
    "JMSRedelivered": lambda h: h.get("redelivered") == "true",
    "JMSXGroupID": lambda h: h.get("JMSXGroupID"),
    "JMSXGroupSeq": lambda h: _integer(h, "JMSXGroupSeq", 0),
    "JMSXUserID": lambda h: h.get("JMSXUserID"),
}


def resolve(name: str) -> str | Getter | None:
    """What identifier ``name`` reads.

    Returns the header key for a plain property, a getter for a JMS header
    name, or ``None`` when the identifier always reads NULL.
    """
    getter = JMS_HEADERS.get(name)
    if getter is not None:
        return getter
    if name in HIDDEN_HEADERS or name in _UNSUPPORTED:
        return None
    return name
