"""The page's third-party files in ``static/vendor/``, each checked against the SHA-256
pinned in ``vendor.json``.

They are committed and packaged with the broker (every install has a working
console, without npm or a network). Where they come from is checked, not
trusted: ``make console`` runs ``npm ci`` in ``console/`` (the versions pinned
by its ``package-lock.json``, whose integrity npm checks), then
``python -m minibroker.edge.console console/node_modules``: every file listed
in ``vendor.json`` is copied only if its hash is the pinned one, so the
committed files come back byte for byte. ``check`` says what is wrong with the
vendored files as they are (a test runs it on the committed files, ``serve``
at start).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["VENDOR_DIR", "pinned_files", "check", "vendor"]

HERE = Path(__file__).resolve().parent
#: Where the served copies go (``/static/vendor/NAME``).
VENDOR_DIR = HERE / "static" / "vendor"


def pinned_files() -> list[dict[str, Any]]:
    """The entries of ``vendor.json``: package, version, source (in the package), name, sha256."""
    return list(json.loads((HERE / "vendor.json").read_text(encoding="utf-8"))["files"])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check(directory: Path = VENDOR_DIR) -> list[str]:
    """What is wrong with the vendored files in ``directory`` (empty: all there, all pinned)."""
    problems = []
    for entry in pinned_files():
        path = directory / entry["name"]
        if not path.is_file():
            problems.append(f"{entry['name']} is missing (make console vendors it)")
        elif _sha256(path) != entry["sha256"]:
            problems.append(
                f"{entry['name']} is not {entry['package']} {entry['version']}'s {entry['source']} "
                f"(sha256 {_sha256(path)}, pinned {entry['sha256']})"
            )
    return problems


def vendor(node_modules: Path, directory: Path = VENDOR_DIR) -> list[str]:
    """Copy the pinned files from ``node_modules`` into ``directory``; the problems, if any
    (a file whose version or hash is not the pinned one is not copied)."""
    problems = []
    directory.mkdir(parents=True, exist_ok=True)
    for entry in pinned_files():
        package = node_modules / entry["package"]
        source = package / entry["source"]
        installed = (
            json.loads((package / "package.json").read_text(encoding="utf-8")).get("version")
            if (package / "package.json").is_file()
            else None
        )
        if installed != entry["version"]:
            problems.append(f"{entry['package']} {installed or 'is not installed'}: {entry['version']} is pinned")
        elif not source.is_file() or _sha256(source) != entry["sha256"]:
            problems.append(f"{entry['package']} {entry['version']}'s {entry['source']} does not have the pinned hash")
        else:
            shutil.copyfile(source, directory / entry["name"])
    return problems
