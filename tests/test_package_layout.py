"""The packages' layout: module names that cannot shadow the standard library."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_storage_modules_do_not_shadow_the_standard_library() -> None:
    # storage/bench_journal.py runs by path too, which puts storage/ first on
    # sys.path: a storage module named like a standard one would be imported
    # in its place by anything (argparse imports ``inspect``, for one).
    shadowing = sorted(p.name for p in (ROOT / "storage").glob("*.py") if p.stem in sys.stdlib_module_names)
    assert shadowing == []
