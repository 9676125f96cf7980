"""``lab run NAME --export FILE.html``: the lab's recorded runs as one file to hand out.

The file is the console's own page (``minibroker/edge/console/static``) with everything it
loads written inline: its style sheets, the pinned uPlot (checked against
``vendor.json``), the player and the page's script, and the replay document
(``clients.labs.replay.replay_document``) as a JSON script element, which the page
plays instead of connecting to a broker. A Content-Security-Policy that allows no
request at all keeps it honest: the file works offline, from ``file://``, or it
does not work.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from minibroker.edge.console.vendor import check as vendored_problems
from minibroker.edge.console.web import static_file

__all__ = ["ExportError", "export_html", "write_export"]

#: Nothing leaves the file: no fetch, no socket, no image from elsewhere.
_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'none'; base-uri 'none'; form-action 'none'"
)


class ExportError(Exception):
    """The page's files are not all there."""


def _text(name: str) -> str:
    body = static_file(name)
    if body is None:
        raise ExportError(f"the console's {name} is missing from the package")
    return body.decode("utf-8")


def _inline(name: str) -> str:
    """A file of the page, to be written inside its own element."""
    text = _text(name)
    if re.search(r"</(script|style)", text, re.IGNORECASE):
        raise ExportError(f"the console's {name} cannot be written inline (it closes its own element)")
    return text


def export_html(document: dict[str, Any]) -> str:
    """The page, self-contained, playing ``document`` (a replay document)."""
    problems = vendored_problems()
    if problems:
        raise ExportError("the console's libraries are not in place: " + "; ".join(problems))
    page = _text("index.html")
    # JSON inside a script element: "</" must not end it, so it is written as "<\/" (the same string).
    recording = json.dumps(document, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    inline = {
        '<link rel="stylesheet" href="/static/vendor/uPlot.min.css">': f"<style>{_inline('vendor/uPlot.min.css')}</style>",
        '<link rel="stylesheet" href="/static/console.css">': f"<style>{_inline('console.css')}</style>",
        '<script src="/static/vendor/stomp.umd.min.js"></script>': "",  # no broker to talk to
        '<script src="/static/vendor/uPlot.iife.min.js"></script>': f"<script>{_inline('vendor/uPlot.iife.min.js')}</script>",
        '<script src="/static/player.js" defer></script>': "",
        '<script src="/static/console.js" defer></script>': "",
        "</body>": (
            f'<script type="application/json" id="minibroker-recording">{recording}</script>\n'
            f"<script>{_inline('player.js')}</script>\n<script>{_inline('console.js')}</script>\n</body>"
        ),
        '<meta charset="utf-8">': f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
    }
    for old, new in inline.items():
        if page.count(old) != 1:
            raise ExportError(f"the console's index.html no longer has {old!r} once")
        page = page.replace(old, new)
    title = f"minibroker: lab {document['lab']['name']}"
    return page.replace("<title>minibroker console</title>", f"<title>{_escape(title)}</title>")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_export(document: dict[str, Any], path: Path) -> int:
    """Write the file; its size in bytes."""
    data = export_html(document).encode("utf-8")
    path.write_bytes(data)
    return len(data)
