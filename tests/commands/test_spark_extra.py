"""Without the spark extra (``make run`` installs only the core and uvloop), the commands
that need it say in one line how to install it, and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A Python in which the spark extra's modules are not installed (an import finder that
#: finds none of them), running ``minibroker`` with the arguments given.
WITHOUT_THE_EXTRA = """
import sys
from clients.cli import SPARK_EXTRA_MODULES, main

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in SPARK_EXTRA_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "tests/data/sample-trace.jsonl", "--out", "{out}"],
        ["workload", "generate", "examples/workloads/tiny.toml", "--out", "{out}"],
    ],
    ids=["analyze", "workload"],
)
def test_a_command_that_needs_the_spark_extra_says_how_to_install_it(argv: list[str], tmp_path: Path) -> None:
    args = [a.replace("{out}", str(tmp_path / "out")) for a in argv]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_EXTRA, *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"minibroker {argv[0]}: needs the spark extra (") and "make spark" in line, line
