"""Operations over STOMP: purge, delete, close, browse and move (docs/admin.md),
and whoami (which of them the asking connection may use).

A client sends a message to ``/queue/ActiveMQ.Admin.<Operation>`` with
headers naming what to act on (``target``, ``to``, ``connection``,
``selector``, ``count``) and usually a ``reply-to``; the broker answers with
one JSON object, as the statistics destinations do (``stats.py``). Nothing
here reads a socket or the clock: an operation is a function of the broker's
state and the request's headers, run inside one turn of the core.

Who may: the ``admin`` right on the operation's own queue
(``queue://ActiveMQ.Admin.Purge`` ...) and on every destination it touches
(``Security.check_admin``). Any refusal is a ``ProtocolError`` (an ERROR
frame whose message says what was wrong), raised before anything changed,
except a store that refuses in the middle of a move (see ``_move``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from minibroker.destinations.destination import Destination, parse_address
from minibroker.destinations.queue import Queue
from minibroker.destinations.topic import Topic
from minibroker.errors import ProtocolError, ResourceLimitError
from minibroker.frames import Frame
from minibroker.protocol.codec import encode
from minibroker.protocol.headers import int_header
from minibroker.protocol.message import Message, moved_copy

if TYPE_CHECKING:
    from minibroker.connection.clock import Clock
    from minibroker.connection.security import Security
    from minibroker.connection.session import Session
    from minibroker.destinations.paged import PagedRef
    from minibroker.durability.persistence import MessageStore

__all__ = ["ADMIN_PREFIX", "AdminResult", "is_admin_address", "perform"]

log = logging.getLogger("minibroker.broker")

ADMIN_PREFIX = "/queue/ActiveMQ.Admin."

#: Browse: how many messages by default, at most, and how much of each body.
_BROWSE_DEFAULT = 10
_BROWSE_MAX = 1000
_BODY_LIMIT = 65536


def is_admin_address(address: str) -> bool:
    return address.startswith(ADMIN_PREFIX)


class AdminFrames(Protocol):
    """Frame handling, as the operations use it: destinations by address, selectors."""

    def destination(self, address: str) -> Destination:
        """The destination at ``address``, created on first use (a ``ProtocolError`` if it may not be)."""

    def compile_selector(self, text: str | None) -> Any:
        """A compiled selector, or None for no selector (a ``ProtocolError`` if invalid)."""


class AdminHooks(Protocol):
    """The destination hooks, as the operations use them."""

    def message_consumed(self, destination: Destination, message: Message) -> None: ...

    def forget_destination(self, destination: Destination) -> None: ...


class AdminStore(Protocol):
    """The store hooks, as the operations use them: messages in and out, in one storage transaction."""

    def load_message(self, destination: Destination, paged: PagedRef, payload: bytes | None = None) -> Message: ...

    def admit(self, destination: Destination, message: Message) -> Any:
        """Journal (if persistent) and hand ``message`` to ``destination``."""

    def discard_stored(self, ref: Any) -> None: ...

    def begin_storage_transaction(self, session: Session) -> str: ...

    def commit_storage_transaction(self, txid: str) -> None: ...

    def end_storage_transaction(self) -> None: ...


class AdminHost(Protocol):
    """The broker as its operations see it (``broker.Broker`` satisfies it): what
    they read, and the parts through which they change it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def security(self) -> Security: ...

    @property
    def store(self) -> MessageStore | None: ...

    @property
    def sessions(self) -> Mapping[int, Session]: ...

    @property
    def destinations(self) -> Mapping[str, Destination]: ...

    @property
    def handlers(self) -> AdminFrames: ...

    @property
    def hooks(self) -> AdminHooks: ...

    @property
    def storehooks(self) -> AdminStore: ...

    def session_tag(self, sid: int) -> str:
        """Connection ``sid`` as CONNECTED's ``session`` header names it."""

    def close_connection(self, session: Session, reason: str) -> None: ...


@dataclass
class AdminResult:
    """What an operation did: its answer, and what to do once the answer is sent.
    (Its RECEIPT waits for the fsync of what it wrote: ``StoreHooks.receipt``.)"""

    answer: dict[str, Any]
    then: Callable[[], None] | None = None


def perform(broker: AdminHost, session: Session, address: str, headers: Mapping[str, str]) -> AdminResult:
    """Carry out the operation requested by a SEND to ``address``."""
    name = address[len(ADMIN_PREFIX) :]
    operation = _OPERATIONS.get(name)
    if operation is None:
        raise ProtocolError(
            f"unknown admin operation {address}: use ActiveMQ.Admin.{', ActiveMQ.Admin.'.join(_OPERATIONS)}"
        )
    verb = name.lower()
    if headers.get("transaction") is not None:
        raise ProtocolError(f"an admin {verb} is not transactional: send it without a transaction header")
    if name != "Whoami":  # the one any user may ask: what may I do?
        broker.security.check_admin(session.principal, verb, "queue", address[len("/queue/") :])
    if name in ("Browse", "Whoami") and not headers.get("reply-to"):
        raise ProtocolError(f"a {verb} request to {address} needs a reply-to header (where the answer goes)")
    return operation(broker, session, headers)


def _destination(
    broker: AdminHost, session: Session, headers: Mapping[str, str], header: str, verb: str
) -> Destination:
    """The existing destination a header names, after checking the admin right on it."""
    address = headers.get(header)
    if not address:
        raise ProtocolError(f"an admin {verb} needs a {header} header: the destination's address, e.g. /queue/orders")
    found = broker.destinations.get(address)
    if found is None:
        if parse_address(address) is None and not address.startswith("/remote-temp-"):
            raise ProtocolError(f"bad {header} {address!r}: use /queue/NAME or /topic/NAME")
        raise ProtocolError(f"cannot {verb} {address}: no such destination")
    broker.security.check_admin(session.principal, verb, found.kind, found.name)
    return found


def _queue(broker: AdminHost, session: Session, headers: Mapping[str, str], header: str, verb: str) -> Queue:
    found = _destination(broker, session, headers, header, verb)
    if not isinstance(found, Queue):
        raise ProtocolError(
            f"cannot {verb} {found.address}: {verb} needs a queue (a topic keeps no messages of its own)"
        )
    return found


# ---------------------------------------------------------------- whoami
def _whoami(broker: AdminHost, session: Session, headers: Mapping[str, str]) -> AdminResult:
    """Who the connection is and which operations it may send (a console shows only those)."""
    principal = session.principal
    allowed = [
        name
        for name in _OPERATIONS
        if name != "Whoami" and broker.security.allows(principal, "admin", "queue", f"ActiveMQ.Admin.{name}")
    ]
    return AdminResult(
        {
            "operation": "whoami",
            "connection": session.id,
            "user": principal.name,
            "groups": sorted(principal.groups),
            "operations": allowed,
        }
    )


# ---------------------------------------------------------------- purge, delete
def _purge(broker: AdminHost, session: Session, headers: Mapping[str, str]) -> AdminResult:
    queue = _queue(broker, session, headers, "target", "purge")
    purged = queue.purge()
    log.info("%s purged by %s: %d messages", queue.address, session.principal.name, purged)
    return AdminResult({"operation": "purge", "destination": queue.address, "purged": purged, "size": queue.size()})


def _delete(broker: AdminHost, session: Session, headers: Mapping[str, str]) -> AdminResult:
    dest = _destination(broker, session, headers, "target", "delete")
    if dest.owner is not None:
        raise ProtocolError(f"cannot delete {dest.address}: a temporary destination goes when its connection closes")
    users = [s for s in broker.sessions.values() for sub in s.subscriptions.values() if sub.destination is dest]
    if users:
        ids = ", ".join(sorted({str(s.id) for s in users}, key=int))
        raise ProtocolError(
            f"cannot delete {dest.address}: it has {len(users)} consumer(s) on connection(s) {ids}; close them first"
        )
    blocked = [s for s in broker.sessions.values() if any(p.destination is dest for p in s.producing.parked)]
    if blocked:
        ids = ", ".join(str(s.id) for s in blocked)
        raise ProtocolError(
            f"cannot delete {dest.address}: producers on connection(s) {ids} are blocked sending to it; "
            "purge it instead, or close them first"
        )
    purged = 0
    if isinstance(dest, Queue):
        purged = dest.purge()
    elif isinstance(dest, Topic):
        for client_id, name in list(dest.durables):
            purged += len(dest.durables[(client_id, name)].pending)
            dest.delete_durable(client_id, name)
    broker.hooks.forget_destination(dest)
    log.info("%s deleted by %s (%d messages dropped)", dest.address, session.principal.name, purged)
    return AdminResult({"operation": "delete", "destination": dest.address, "purged": purged})


# ---------------------------------------------------------------- close
def _close_connection(broker: AdminHost, session: Session, headers: Mapping[str, str]) -> AdminResult:
    text = headers.get("connection")
    if not text:
        raise ProtocolError("an admin close needs a connection header: the id the Connection statistics show")
    tag_prefix = broker.session_tag(0)[:-1]  # CONNECTED's ``session`` header is this and the id
    if text.startswith(tag_prefix):
        text = text[len(tag_prefix) :]
    cid = int_header({"connection": text}, "connection", 0, 1, None, clamp=False)
    target = broker.sessions.get(cid)
    if target is None:
        raise ProtocolError(f"cannot close connection {cid}: no such connection")
    user = session.principal.name
    answer = {
        "operation": "close",
        "connection": cid,
        "remoteAddress": target.peer,
        "clientId": target.client_id,
        "user": target.principal.name,
    }

    def close() -> None:
        if target.is_open:
            reason = f"closed by an administrator (user {user})"
            target.write(encode(Frame("ERROR", {"message": reason}), target.version))
            log.warning("connection %d (%s) %s", target.id, target.peer, reason)
            broker.close_connection(target, reason)

    return AdminResult(answer, then=close)


# ---------------------------------------------------------------- browse
def _browse(broker: AdminHost, session: Session, headers: Mapping[str, str]) -> AdminResult:
    queue = _queue(broker, session, headers, "target", "browse")
    count = int_header(headers, "count", _BROWSE_DEFAULT, 1, _BROWSE_MAX, clamp=False)
    limit = int_header(headers, "body-limit", _BODY_LIMIT, 0, None, clamp=False)
    now_ms = broker.clock.wall_ms()
    shown: list[dict[str, Any]] = []
    for message in queue.pending:
        if len(shown) >= count:
            break
        if not message.is_expired(now_ms):
            shown.append(describe_message(message, limit))
    if len(shown) < count:
        for paged in queue.cursor.store_only:  # read from disk, left where it is
            if len(shown) >= count:
                break
            if not (0 < paged.expires <= now_ms):
                shown.append(describe_message(broker.storehooks.load_message(queue, paged), limit))
    return AdminResult(
        {
            "operation": "browse",
            "destination": queue.address,
            "size": queue.size(),
            "readyCount": len(queue.pending) + len(queue.cursor.store_only),
            "messages": shown,
        }
    )


def describe_message(message: Message, body_limit: int) -> dict[str, Any]:
    """A message as JSON for a browse: headers, and the body as text or base64."""
    body = message.body[:body_limit]
    try:
        text, encoding = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(body).decode("ascii"), "base64"
    return {
        "messageId": message.message_id,
        "headers": dict(message.headers),
        "body": text,
        "bodyEncoding": encoding,
        "bodySize": len(message.body),
        "bodyTruncated": len(message.body) > body_limit,
        "persistent": message.persistent,
        "priority": message.priority,
        "timestamp": message.timestamp,
        "expires": message.expires,
        "redelivered": message.redeliveries > 0,
    }


# ---------------------------------------------------------------- move
def _move(broker: AdminHost, session: Session, headers: Mapping[str, str]) -> AdminResult:
    """Move waiting messages of one queue to another (or each to its original one).

    Theory of operation: the cached messages (the oldest) are taken out of the
    source's cache first, then the store-only ones are read from disk one at a
    time and handed to their target at once (which caches or stores them by its
    own cursor's rules), so a deep DLQ is never in memory whole; the source's
    store-only index drops the moved ones at the end. Every journal record of
    the move carries one storage transaction, committed at the end: a crash
    leaves each message in its source or its target. If the store refuses an
    enqueue part way (a full journal), the move stops there: what moved is
    committed and answered, the rest stays in the source.
    """
    source = _queue(broker, session, headers, "target", "move")
    fixed: Queue | None = None
    if headers.get("to"):
        fixed = _target_queue(broker, session, headers["to"], source)
    selector = broker.handlers.compile_selector(headers.get("selector"))
    limit = int_header(headers, "count", 0, 0, None, clamp=False) or None
    targets: dict[str, Queue | str] = {}  # address -> its queue, or why not

    def target_of(message: Message) -> Queue | str:
        if fixed is not None:
            return fixed
        address = message.headers.get("original-destination")
        if not address:
            return "no original-destination header"
        if address not in targets:
            try:
                targets[address] = _target_queue(broker, session, address, source)
            except ProtocolError as exc:
                targets[address] = exc.message
        return targets[address]

    moved: dict[str, int] = {}
    skipped: dict[str, int] = {}
    store = broker.store
    txid = None
    if store is not None:
        txid = broker.storehooks.begin_storage_transaction(session)
    failure: str | None = None

    waiting = len(source.pending) + len(source.cursor.store_only)  # before the move
    chosen = 0  # messages the selector and the count let through so far

    def wanted(message: Message) -> bool:
        nonlocal chosen
        if (limit is not None and chosen >= limit) or (
            selector is not None and not selector.matches(message.header_view())
        ):
            return False
        chosen += 1
        return True

    def carry(message: Message) -> bool:
        """Hand one message to its target; False if it stays (skipped, or the store refused)."""
        nonlocal failure
        target = target_of(message)
        if isinstance(target, str):
            skipped[target] = skipped.get(target, 0) + 1
            return False
        copy = moved_copy(message, target.address)
        try:
            broker.storehooks.admit(target, copy)
        except ResourceLimitError as exc:
            failure = exc.message
            return False
        moved[target.address] = moved.get(target.address, 0) + 1
        return True

    try:
        now_ms = broker.clock.wall_ms()
        taken = source.pending.remove_where(lambda m: not m.is_expired(now_ms) and wanted(m))
        kept: list[Message] = []
        for message in taken:
            if failure is None and carry(message):
                broker.hooks.message_consumed(source, message)
            else:
                kept.append(message)
        source.pending.push_front(kept)
        gone: set[int] = set()
        if failure is None and (limit is None or chosen < limit):
            for paged in source.cursor.store_only:
                if limit is not None and chosen >= limit:
                    break
                if 0 < paged.expires <= now_ms:
                    continue  # the expiry sweep's
                message = broker.storehooks.load_message(source, paged)
                if not wanted(message):
                    continue
                if carry(message):
                    gone.add(paged.seq)
                elif failure is not None:
                    break
        if gone:
            for paged in source.cursor.store_only.remove_where(lambda r: r.seq in gone):
                broker.storehooks.discard_stored(paged.ref)
        source.dequeued += sum(moved.values())
        if store is not None and txid is not None:
            try:
                broker.storehooks.commit_storage_transaction(txid)
            except ResourceLimitError as exc:
                failure = exc.message
    finally:
        broker.storehooks.end_storage_transaction()
    total = sum(moved.values())
    log.info("%s: %d messages moved by %s to %s", source.address, total, session.principal.name, moved or "-")
    if failure is not None:
        raise ProtocolError(f"move from {source.address} stopped after {total} messages: {failure}")
    answer = {
        "operation": "move",
        "from": source.address,
        "to": fixed.address if fixed is not None else None,
        "moved": total,
        "movedTo": moved,
        "skipped": skipped,
        "waiting": waiting,
        "selected": chosen,
    }
    source.dispatch()
    return AdminResult(answer)


def _target_queue(broker: AdminHost, session: Session, address: str, source: Queue) -> Queue:
    """The queue a move may put messages in (created if needed), rights checked."""
    parsed = parse_address(address)
    if parsed is None:
        found = broker.destinations.get(address)
        if found is None:
            raise ProtocolError(f"cannot move to {address}: no such destination")
        parsed = (found.kind, found.name)
    kind, name = parsed
    if kind != "queue":
        raise ProtocolError(f"cannot move to {address}: not a queue")
    if address == source.address:
        raise ProtocolError(f"cannot move to {address}: it is the source")
    broker.security.check_admin(session.principal, "move to", kind, name)
    target = broker.handlers.destination(address)
    assert isinstance(target, Queue)
    return target


_OPERATIONS: dict[str, Callable[[AdminHost, Session, Mapping[str, str]], AdminResult]] = {
    "Purge": _purge,
    "Delete": _delete,
    "Close": _close_connection,
    "Browse": _browse,
    "Move": _move,
    "Whoami": _whoami,
}
