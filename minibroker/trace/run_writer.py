"""The writer process's entry point: ``python -m minibroker.trace.run_writer --write ...``.

Started by ``Trace(offload=True)`` (``spool.start_writer``), never imported by
the package: ``-m`` runs it as ``__main__``.
"""

from __future__ import annotations

import sys

from .writer import write_from_spool

USAGE = (
    "usage: python -m minibroker.trace.run_writer --write PATH BROKER NICE LAG_LIMIT LOAD_STAT FORMAT"
    "  (started by Trace(offload=True))"
)


def main(argv: list[str]) -> int:
    """Convert the spool of the trace at ``PATH`` until the broker closes it (or dies)."""
    if len(argv) != 7 or argv[0] != "--write":
        sys.exit(USAGE)
    return write_from_spool(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5], argv[6])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
