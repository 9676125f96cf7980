"""``minibroker journal``: look at, compact and repair a broker's journals.

``inspect DIR`` prints, per journal file, its live enqueues and the messages
that pin it, then a totals line (Qpid's ``store_chk``). ``compact DIR``
rewrites the messages stranded in old files next to each other at the head of
the journal, in one transaction, so a crash midway neither loses nor
duplicates one (the workaround Red Hat gives for Qpid's "Enqueue threshold exceptions
triggered for qpid queue with few messages only"). ``repair DIR`` truncates a
journal damaged in the middle at its last good record, keeping a ``.broken``
copy of each file it cuts. DIR is a broker data directory (``./data``) or a
journal directory; compact and repair refuse while a broker has it open.
"""

from __future__ import annotations

import argparse
import fcntl
import os
from pathlib import Path

from storage import Journal, StorageError, TransactionLog, compact, format_report, inspect, repair
from storage.recovery import detect_config

from ..cli import CommandError

__all__ = ["register", "journal_directories"]

_MARKERS = ("JournalData.*.jdat", "db-*.log")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "journal",
        help="inspect, compact or repair journals",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, text in (
        ("inspect", "per file: live enqueues and the messages pinning it"),
        ("compact", "re-enqueue stranded messages next to each other (broker stopped)"),
        ("repair", "truncate a damaged journal at its last good record (broker stopped)"),
    ):
        p = actions.add_parser(name, help=text, description=text)
        p.add_argument("directory", metavar="DIR", help="a broker data directory or a journal directory")
        p.set_defaults(func=_ACTIONS[name])


def journal_directories(root: str | os.PathLike[str]) -> list[Path]:
    """Every journal directory at or under ``root``."""
    base = Path(root)
    if not base.is_dir():
        raise CommandError(f"no such directory: {root}")
    found = sorted({p.parent for pattern in _MARKERS for p in base.rglob(pattern)})
    if not found:
        raise CommandError(f"no journal files under {root}")
    return found


def _lock_owner(directory: Path) -> Path | None:
    """The data directory lock held by a running broker, if any covers ``directory``."""
    for candidate in [directory, *directory.parents]:
        lock = candidate / "lock"
        if lock.exists():
            with open(lock, "a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return lock
                fcntl.flock(f, fcntl.LOCK_UN)
    return None


def _require_stopped(directory: Path) -> None:
    lock = _lock_owner(directory)
    if lock is not None:
        raise CommandError(f"a running broker holds {lock}: stop it first")


def _inspect(args: argparse.Namespace) -> int:
    reports = []
    for directory in journal_directories(args.directory):
        try:
            reports.append(format_report(inspect(directory)))
        except StorageError as exc:
            raise CommandError(f"cannot read the journal in {directory}: {exc}", 1) from None
    print("\n\n".join(reports))
    return 0


def _decided_transactions(directory: Path) -> frozenset[bytes]:
    """Decisions of cross-queue transactions in the data directory above ``directory``:
    a crash may have cut their commits short, and opening must complete them."""
    for candidate in directory.parents:
        if (candidate / "txlog").is_dir():
            with TransactionLog(candidate / "txlog") as log:
                return log.decided()
    return frozenset()


def _compact(args: argparse.Namespace) -> int:
    for directory in journal_directories(args.directory):
        if directory.name == "txlog":
            continue  # the transaction log holds decisions, not messages
        _require_stopped(directory)
        try:
            with Journal.open(detect_config(directory), committed=_decided_transactions(directory)) as journal:
                moved = compact(journal)
                journal.sync()
                print(f"{directory}: moved {len(moved)} message(s); {journal.live_count} live")
                print(format_report(inspect(journal)))
        except StorageError as exc:
            raise CommandError(f"cannot compact the journal in {directory}: {exc}", 1) from None
    return 0


def _repair(args: argparse.Namespace) -> int:
    for directory in journal_directories(args.directory):
        _require_stopped(directory)
        try:
            actions = repair(directory)
        except StorageError as exc:
            raise CommandError(f"cannot repair the journal in {directory}: {exc}", 1) from None
        if not actions:
            print(f"{directory}: clean, nothing to repair")
        for action in actions:
            print(
                f"{directory}: cut {action.file} at offset {action.offset} ({action.reason}); "
                f"the damaged file is kept as {action.broken_copy}"
            )
    return 0


_ACTIONS = {"inspect": _inspect, "compact": _compact, "repair": _repair}
