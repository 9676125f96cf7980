"""Test support: each lab run once per test process, for every test that reads its runs.

A lab's runs on the virtual clock repeat exactly, so the tests that read them (the
verdicts and the README's quotes in ``tests/labs/test_labs.py``, the trace analysis in
``tests/spark/test_lab_findings.py``) share one run of each lab: recorded for the
console's player (which changes no verdict) and analysed in process (``--plot``).
``tests/conftest.py`` hands it to them as the session fixture ``lab_results``, and keeps
a lab's tests on one xdist worker.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from clients.labs import find_labs, run_lab

LABS = find_labs()
#: The labs whose runs' plots are drawn: the one whose plots a test reads. Drawing every
#: run's plots (up to six 1600x900 PNGs a run) was most of these tests' CPU, and no test read the rest.
DRAWN = {"00"}
#: A finding as ``lab run --plot`` prints it under its run's "trace analysis:" line.
_FINDING = re.compile(r"^      +[\d.]+-[\d.]+ +s  \w+: ")


class LabResults:
    """Each lab run once (recorded and analysed in process), when a test first asks for one
    of its runs: ``[number]`` -> that lab's RunResults, ``[(number, run)]`` -> one RunResult;
    ``printed(number)``: what ``minibroker lab run NUMBER`` printed for them."""

    def __init__(self, directory: Path) -> None:
        self._done: dict[Any, Any] = {}
        self._printed: dict[str, list[str]] = {}
        self._directory = directory

    def __getitem__(self, key: str | tuple[str, str]) -> Any:
        number = key if isinstance(key, str) else key[0]
        if number not in self._done:
            lab = next(lab for lab in LABS if lab.number == number)
            lines: list[str] = []
            plot_dir = self._directory / lab.number
            results = run_lab(lab, plot_dir=plot_dir, out=lines.append, record=True, draw=number in DRAWN)
            assert all(r.as_promised for r in results), "\n".join(lines)
            self._done[number] = results
            self._printed[number] = lines
            for r in results:
                self._done[(number, r.spec.name)] = r
        return self._done[key]

    def printed(self, number: str) -> list[str]:
        """What ``lab run`` printed for the lab's runs, without ``--plot``: the lines the
        analysis adds (each run's "trace analysis:" line and its findings, and the closing
        "Trace analysis:" line) left out."""
        self[number]
        kept: list[str] = []
        findings = False
        for line in self._printed[number]:
            if line.startswith("    trace analysis: "):
                findings = True
            elif not (findings and _FINDING.match(line)):
                findings = False
                if not line.startswith("Trace analysis: "):
                    kept.append(line)
        return kept
