"""The console's third-party files: the versions pinned by the lock file, the bytes pinned
by hash, and the build refusing a file that is not the pinned one."""

from __future__ import annotations

import json
from pathlib import Path

from minibroker.edge.console.vendor import check, pinned_files, vendor

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "console" / "package-lock.json"


def test_the_pinned_versions_are_the_lock_files() -> None:
    packages = json.loads(LOCK.read_text(encoding="utf-8"))["packages"]
    declared = json.loads((ROOT / "console" / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for entry in pinned_files():
        locked = packages[f"node_modules/{entry['package']}"]
        assert locked["version"] == entry["version"] == declared[entry["package"]], entry
        assert locked["integrity"].startswith("sha512-")  # npm ci checks the tarball against it


def test_the_served_files_have_the_pinned_hashes() -> None:
    assert check() == [], "the committed files are not the pinned ones (make console vendors them again)"


def test_vendoring_refuses_a_file_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    node_modules = tmp_path / "node_modules"
    for entry in pinned_files():
        package = node_modules / entry["package"]
        (package / entry["source"]).parent.mkdir(parents=True, exist_ok=True)
        (package / "package.json").write_text(json.dumps({"version": entry["version"]}))
        (package / entry["source"]).write_text("tampered")
    out = tmp_path / "vendor"
    problems = vendor(node_modules, out)
    assert len(problems) == len(pinned_files()) and all("pinned hash" in p for p in problems)
    assert not any(out.iterdir())  # nothing copied
    assert all("missing" in p for p in check(out))
