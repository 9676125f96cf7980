"""The console's port: the page's files, ``/metrics``, and STOMP over WebSocket at ``/stomp``.

Theory of operation
-------------------
One more edge connection, built like the WebSocket one (``websocket.py``): the
websockets library's sans-IO ``ServerProtocol`` reads the HTTP request, and
this module answers it.

- ``GET /stomp`` with a WebSocket upgrade: the page's own STOMP connection.
  Only then does the connection become a broker session (the same sessions,
  users, rights and limits as every client); the page reads the statistics and
  sends admin operations over it, so the console has no second statistics path.
  A browser may upgrade only from the console's own origin (its ``Host``) or a
  page in ``transport.allowed_origins``.
- ``GET /metrics``: the Prometheus text format (``metrics.py``).
- ``GET /`` and ``GET /static/...``: the page's files, packaged with the
  broker (``static/``; the vendored libraries under ``static/vendor/``).

Each plain request gets one response and the connection closes (the library's
HTTP handling is that of a WebSocket handshake: no keep-alive), which is all a
console page of a few files and a scraper every few seconds need. The library
bounds the request (line and header sizes); a request that does not arrive
within the transport's connect timeout is dropped.

Why this and not an HTTP framework: the websockets library is already the
broker's WebSocket edge, runs in the broker's event loop as a sans-IO object
beside the other connections, and needs no thread; the console serves a few
static files and one generated text, and the page is same-origin with its
STOMP connection, so it works when ``transport.websocket_port`` is off.
"""

from __future__ import annotations

import email.utils
import http
import logging
import mimetypes
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from minibroker.edge.console.metrics import metrics_text
from minibroker.edge.console.vendor import check as vendored_problems
from minibroker.edge.websocket import WebSocketConnection

__all__ = ["ConsoleConnection", "STOMP_PATH", "static_file"]

log = logging.getLogger("minibroker.console")

#: Where the page's STOMP over WebSocket connection upgrades.
STOMP_PATH = "/stomp"


def static_file(name: str) -> bytes | None:
    """The bytes of a file of the page (``static/NAME``), or None if there is none."""
    if not name or any(part in ("", ".", "..") for part in name.split("/")):
        return None
    node = resources.files(__package__).joinpath("static")
    for part in name.split("/"):
        node = node.joinpath(part)
    try:
        return node.read_bytes() if node.is_file() else None
    except OSError:
        return None


def _response(status: http.HTTPStatus, body: bytes, content_type: str) -> Response:
    headers = Headers(
        [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Connection", "close"),
            ("Content-Length", str(len(body))),
            ("Content-Type", content_type),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
        ]
    )
    return Response(status.value, status.phrase, headers, body)


class ConsoleConnection(WebSocketConnection):
    """A connection to the console's port: one HTTP request, or the page's STOMP session."""

    def handle_request(self, request: Request) -> None:
        self._request_arrived()
        path = request.path.split("?", 1)[0]
        ws = self.ws
        if path == STOMP_PATH:
            host = request.headers.get("Host", "")
            origins: list[Any] = [
                *self.server.broker.config.transport.allowed_origins,
                f"http://{host}",
                f"https://{host}",
                None,
            ]
            ws.origins = origins
            self.upgrade(request)
            return
        try:
            response = self._answer(path)
        except Exception:  # a bug: said in the log with its traceback, and to the client as a 500
            log.exception("the console's answer to GET %s failed", path)
            text = "the broker failed to answer this request; its log says why\n"
            response = _response(http.HTTPStatus.INTERNAL_SERVER_ERROR, text.encode(), "text/plain; charset=utf-8")
        ws.send_response(response)

    def _answer(self, path: str) -> Response:
        """The response to a plain GET of ``path``: ``/metrics``, the page or one of its files."""
        missing = vendored_problems() if path == "/" else []
        if path == "/metrics":
            response = _response(http.HTTPStatus.OK, metrics_text(self.server.broker), CONTENT_TYPE_LATEST)
        elif missing:
            text = "The console's libraries are not the pinned ones (`make console` vendors them):\n" + "\n".join(
                missing
            )
            response = _response(http.HTTPStatus.SERVICE_UNAVAILABLE, text.encode(), "text/plain; charset=utf-8")
        else:
            name = "index.html" if path == "/" else path[len("/static/") :] if path.startswith("/static/") else ""
            body = static_file(name)
            if body is None:
                response = _response(
                    http.HTTPStatus.NOT_FOUND, f"nothing at {path}\n".encode(), "text/plain; charset=utf-8"
                )
            else:
                content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
                if content_type.startswith("text/") or content_type == "application/javascript":
                    content_type += "; charset=utf-8"
                response = _response(http.HTTPStatus.OK, body, content_type)
        return response
