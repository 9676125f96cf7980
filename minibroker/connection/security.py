"""Authentication and authorization, after ActiveMQ's simple plugins.

- Users come from ``[[users]]`` with salted PBKDF2-SHA256 hashes
  (``pbkdf2_sha256$<iterations>$<salt>$<hash>``, base64 without padding);
  ``hash_password`` makes one (the ``minibroker passwd`` command prints it).
- With no users configured, anyone may connect (anonymous access); with users,
  CONNECT must carry a matching ``login`` and ``passcode``. A refusal never says
  which part was wrong: ActiveMQ's "User name [x] or password is invalid."
  Nor does its timing: an unknown user's passcode is hashed against a dummy
  hash of the same cost, so every refusal costs one hash. ``check_login`` is
  that slow part; the broker core never calls it, it hands it to its edge to
  run in a thread (``actions.CheckLogin``), so a hash never stops the event
  loop. Its ``pbkdf2`` is a seam tests replace to count or slow the hashing.
- With ``[[authorization]]`` entries, every operation on a destination needs
  the matching right: ``read`` (subscribe, browse), ``write`` (send) and
  ``admin`` (create a destination that does not exist yet; and the operations of
  ``admin.py``, on their own queue and on each destination), granted to groups
  or user names by the most specific matching wildcard entry, as ActiveMQ's
  ``authorizationMap``. Without entries, an authenticated user may do anything.
- Temporary destinations belong to the connection that made them: only it
  consumes from one, and another connection sends to one (a reply to its
  ``reply-to``) only with the ``write`` right of
  ``[temp_destination_authorization]`` (ActiveMQ's
  ``tempDestinationAuthorizationEntry``; ActiveMQ leaves them open when there
  is no such entry, we close them).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import os
from collections.abc import Callable

from minibroker import wildcards
from minibroker.config import AuthorizationEntry, BrokerConfig, User
from minibroker.errors import ProtocolError

__all__ = ["hash_password", "verify_password", "Security", "Principal", "ANONYMOUS"]

_SCHEME = "pbkdf2_sha256"
_ITERATIONS = 200_000


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, *, iterations: int = _ITERATIONS, salt: bytes | None = None) -> str:
    """A salted PBKDF2-SHA256 hash of ``password`` for the configuration."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{_SCHEME}${iterations}${_b64(salt)}${_b64(digest)}"


#: The key derivation ``verify_password`` calls: ``(name, password, salt, iterations) -> bytes``.
Pbkdf2 = Callable[[str, bytes, bytes, int], bytes]


def verify_password(password: str, encoded: str, pbkdf2: Pbkdf2 = hashlib.pbkdf2_hmac) -> bool:
    """Does ``password`` match the hash ``encoded``? (constant-time compare)"""
    try:
        scheme, iterations, salt, digest = encoded.split("$")
        if scheme != _SCHEME:
            return False
        expected = _unb64(digest)
        actual = pbkdf2("sha256", password.encode("utf-8"), _unb64(salt), int(iterations))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(expected, actual)


class Principal:
    """Who a session is: a user name and its groups."""

    __slots__ = ("name", "groups")

    def __init__(self, name: str, groups: frozenset[str]) -> None:
        self.name = name
        self.groups = groups

    def has_any(self, names: tuple[str, ...]) -> bool:
        return self.name in names or not self.groups.isdisjoint(names) or "*" in names


ANONYMOUS = Principal("anonymous", frozenset({"anonymous"}))

_VERBS = {"read": "read from", "write": "write to", "admin": "create"}


class Security:
    """Checks logins and destination rights for one broker configuration."""

    def __init__(self, config: BrokerConfig, pbkdf2: Pbkdf2 = hashlib.pbkdf2_hmac) -> None:
        self._users: dict[str, User] = {u.name: u for u in config.users}
        #: The key derivation every password check calls (a seam for tests).
        self.pbkdf2 = pbkdf2
        self._dummy_hash = _dummy_hash(config.users)
        self._entries: tuple[AuthorizationEntry, ...] = config.authorization
        self._temp_writers: tuple[str, ...] = config.temp_destination_authorization.write
        self._cache: dict[tuple[str, str, str], tuple[str, ...] | None] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    @property
    def authorizes(self) -> bool:
        """Are there ``[[authorization]]`` entries to check?"""
        return bool(self._entries)

    def check_login(self, login: str | None, passcode: str | None) -> Principal | None:
        """The principal for a CONNECT's credentials, or None if refused.

        Slow on purpose (one password hash, whether or not the user exists):
        run it off the event loop. It reads only the configuration.
        """
        user = self._users.get(login or "")
        encoded = user.password_hash if user is not None else self._dummy_hash
        matches = verify_password(passcode or "", encoded, self.pbkdf2)
        if user is None or passcode is None or not matches:
            return None
        return Principal(user.name, frozenset(user.groups))

    def check(self, principal: Principal, right: str, kind: str, name: str) -> None:
        """Raise ``ProtocolError`` unless ``principal`` holds ``right`` on the destination."""
        if not self._entries:
            return
        allowed = self._allowed(right, kind, name)
        if allowed is None or not principal.has_any(allowed):
            raise ProtocolError(f"User {principal.name} is not authorized to {_VERBS[right]}: {kind}://{name}")

    def check_admin(self, principal: Principal, operation: str, kind: str, name: str) -> None:
        """Raise ``ProtocolError`` unless ``principal`` holds the ``admin`` right on the
        destination, for an admin ``operation`` (purge, delete ... see ``admin.py``)."""
        if not self.allows(principal, "admin", kind, name):
            raise ProtocolError(
                f"User {principal.name} is not authorized to {operation}: {kind}://{name} (the admin right is needed)"
            )

    def allows(self, principal: Principal, right: str, kind: str, name: str) -> bool:
        """Does ``principal`` hold ``right`` on the destination? (``check`` without the error)"""
        if not self._entries:
            return True
        allowed = self._allowed(right, kind, name)
        return allowed is not None and principal.has_any(allowed)

    def check_temp_write(self, principal: Principal, address: str) -> None:
        """Raise ``ProtocolError`` unless ``principal`` may send to a temporary
        destination of another connection (``[temp_destination_authorization]``)."""
        if self._entries and not principal.has_any(self._temp_writers):
            raise ProtocolError(
                f"User {principal.name} is not authorized to write to: {address} "
                "(another connection's temporary destination; see [temp_destination_authorization])"
            )

    def _allowed(self, right: str, kind: str, name: str) -> tuple[str, ...] | None:
        key = (right, kind, name)
        if key not in self._cache:
            best: AuthorizationEntry | None = None
            for entry in self._entries:
                if (
                    entry.kind == kind
                    and wildcards.matches(entry.pattern, name)
                    and (best is None or wildcards.specificity(entry.pattern) > wildcards.specificity(best.pattern))
                ):
                    best = entry
            self._cache[key] = getattr(best, right) if best is not None else None
        return self._cache[key]


def _dummy_hash(users: tuple[User, ...]) -> str:
    """A hash no password matches, as costly to check as most users' (for unknown users)."""
    counts = collections.Counter(_iterations(u.password_hash) for u in users)
    iterations = counts.most_common(1)[0][0] if counts else _ITERATIONS
    return f"{_SCHEME}${iterations}${_b64(os.urandom(16))}${_b64(os.urandom(32))}"


def _iterations(encoded: str) -> int:
    parts = encoded.split("$")
    return int(parts[1]) if len(parts) == 4 and parts[1].isascii() and parts[1].isdigit() else _ITERATIONS
