"""One error hierarchy for the broker, after h11's (``h11/_util.py``).

``BrokerError`` is the root of everything the broker raises on purpose:

- ``ProtocolError``: the peer broke STOMP. The session answers with an ERROR
  frame whose ``message`` header is the error text, then closes.
- ``ConfigError``: a configuration key or value is refused at start; the text
  names the key and the value.
- ``ResourceLimitError``: a usage limit refused a frame (producer flow control
  with ``send_fail_if_no_space``, a full journal). The client gets an ERROR.
  ``NoSpaceError``, one of them, is a full disk.
- ``StoreFailure``: the store failed while the broker ran (a failed fsync, an
  I/O error): the broker stopped, and ``minibroker serve`` exits non-zero.

``IllegalTransition`` is not one of them: a connection's state table was
driven the wrong way, a bug in the core (``minibroker.connection.states``).

Storage failures come from ``storage.errors`` (storage sits below this package
and cannot import it). Programming errors are never caught and re-labelled as
client faults: they propagate and fail loudly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import enum

    from minibroker.frames import Frame

__all__ = [
    "BrokerError",
    "ProtocolError",
    "Refused",
    "ConfigError",
    "IllegalTransition",
    "NoSpaceError",
    "ResourceLimitError",
    "StoreFailure",
    "StoreOpenError",
]


class BrokerError(Exception):
    """Root of the errors the broker raises on purpose."""


class ProtocolError(BrokerError):
    """The peer sent something STOMP does not allow.

    ``message`` is one line meant for the ERROR frame's ``message`` header;
    ``detail`` (optional) goes into the ERROR frame's body. When the codec
    raises it, ``frames`` holds the frames completed before the fault (as
    asyncio's ``IncompleteReadError.partial``), so they are handled first.
    """

    def __init__(
        self, message: str, *, detail: str = "", code: str | None = None, client_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        #: A short code for the trace (``client_id_in_use`` ...), when there is one.
        self.code = code
        #: The client-id the frame asked for, when the error is about it.
        self.client_id = client_id
        self.frames: list[Frame] = []


class Refused(ProtocolError):
    """A well-formed request the broker declines: an admin operation on a
    destination that does not exist, a delete while consumers remain ... The
    client gets an ERROR as for a protocol error, but the log calls it what it
    is, the operator's mistake answered (info, ``refused: ...``), not a
    misbehaving client (warning, ``protocol error: ...``)."""


class ConfigError(BrokerError):
    """A configuration key or value was refused; the text names both."""


class ResourceLimitError(BrokerError):
    """A usage limit refused a frame; the client gets an ERROR frame."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NoSpaceError(ResourceLimitError):
    """The disk is full: a persistent message could not be written (nothing was)."""


class StoreFailure(BrokerError):
    """The store failed while the broker ran; it stopped without promising more.

    ``exit_status`` is what ``minibroker serve`` exits with.
    """

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class StoreOpenError(BrokerError):
    """The journals cannot be opened (corruption in the middle of the log)."""


class IllegalTransition(RuntimeError):
    """An event a connection's state table does not allow in its current state.

    A bug in the core, not a protocol error: it is never turned into an ERROR
    frame as the peer's fault."""

    def __init__(self, machine: str, state: enum.Enum, event: enum.Enum) -> None:
        super().__init__(f"{machine}: {event.name} is not allowed in state {state.name}")
        self.machine = machine
        self.state = state
        self.event = event
