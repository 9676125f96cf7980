"""Where ``doctor --live`` reads: the URL, its user and password.

``stomp://[USER:PASS@]HOST:PORT`` is ActiveMQ or minibroker over STOMP;
``http://[USER:PASS@]HOST:PORT/`` is RabbitMQ's management API or ActiveMQ's
Jolokia. ``--user`` / ``--password`` take the place of the URL's.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..model import DoctorError

__all__ = ["Target", "parse_target"]

_DEFAULT_PORTS = {"stomp": 61613, "http": 15672, "https": 15672}


@dataclass(frozen=True)
class Target:
    scheme: str  # stomp, http or https
    host: str
    port: int
    user: str | None
    password: str | None
    path: str = "/"

    @property
    def shown(self) -> str:
        """The URL without its password."""
        who = f"{self.user}@" if self.user else ""
        return f"{self.scheme}://{who}{self.host}:{self.port}{self.path if self.scheme != 'stomp' else ''}"

    @property
    def base(self) -> str:
        """``http://host:port/path`` without credentials (for HTTP)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path.rstrip('/')}"


def parse_target(url: str, user: str | None = None, password: str | None = None) -> Target:
    """``url`` read, ``user`` / ``password`` (when given) in place of the URL's; DoctorError if it is no broker URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise DoctorError(f"bad URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise DoctorError(
            f"bad URL {url!r}: expected stomp://[USER:PASS@]HOST:PORT (ActiveMQ, minibroker) or "
            "http://[USER:PASS@]HOST:PORT/ (RabbitMQ's management API, ActiveMQ's Jolokia)"
        )
    return Target(
        scheme=scheme,
        host=parts.hostname,
        port=port or _DEFAULT_PORTS[scheme],
        user=user if user is not None else (unquote(parts.username) if parts.username else None),
        password=password if password is not None else (unquote(parts.password) if parts.password else None),
        path=parts.path or "/",
    )
