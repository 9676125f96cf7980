"""Build the zip that ``spark-submit --py-files`` ships with the Spark jobs.

    python -m clients.spark.pyfiles build/minibroker-py.zip

The zip holds the project's own packages (``clients``, ``minibroker``,
``storage``: the Python sources only), so the driver can import the job's
modules on any machine that has pyspark. The jobs use only Spark's built-in
functions, so executors run no project Python code; the zip is what makes a
job "self-contained" for the driver.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

__all__ = ["PACKAGES", "build_pyfiles", "main"]

PACKAGES = ("clients", "minibroker", "storage")
ROOT = Path(__file__).resolve().parents[2]


def build_pyfiles(dest: str | Path, root: Path = ROOT) -> Path:
    """Write the zip at ``dest`` (parents created) and return its path."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            base = root / package
            if not (base / "__init__.py").exists():
                continue
            for path in sorted(base.rglob("*.py")):
                if "__pycache__" not in path.parts:
                    zf.write(path, path.relative_to(root).as_posix())
    return dest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m clients.spark.pyfiles OUT.zip", file=sys.stderr)
        return 2
    print(build_pyfiles(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
