"""Which labs ``minibroker lab`` sees (``--labs DIR``), and the one a command names."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli import CommandError
from ..labs import Lab, LabError, find_labs

__all__ = ["all_labs", "find_lab"]


def all_labs(args: argparse.Namespace) -> list[Lab]:
    """Every lab in ``args.labs`` (default: examples/labs); a bad directory is one line."""
    try:
        return find_labs(Path(args.labs) if args.labs else None)
    except LabError as exc:
        raise CommandError(str(exc)) from None


def find_lab(args: argparse.Namespace) -> Lab:
    """The lab ``args.name`` names: its name, its directory name or its number."""
    labs = all_labs(args)
    wanted = args.name
    matches = [
        lab for lab in labs if wanted in (lab.name, lab.directory.name, lab.number, lab.number.lstrip("0") or "0")
    ]
    if not matches:
        names = ", ".join(lab.directory.name for lab in labs)
        raise CommandError(f"no lab {wanted!r}; the labs are: {names}")
    return matches[0]
