"""The report: readable text grouped by severity, or JSON; and the exit status.

Text: a title line, a count line, then one group per severity (errors,
warnings, notes), each finding a headline line followed by its indented
values, why and fix (with the TOML or XML to paste); last, the public documents
cited, by title and date. JSON: one object with
``source``, ``syntax``, ``status``, ``counts`` and ``findings``
(``Finding.to_json``).
"""

from __future__ import annotations

import json
import textwrap

from ..sources import SOURCES
from .model import ERROR, INFO, SEVERITIES, WARNING, Finding, Setup

__all__ = ["exit_status", "format_text", "format_json", "CLEAN", "WARNINGS"]

#: Exit status: no warnings or errors (notes allowed).
CLEAN = 0
#: Exit status: at least one warning or error.
WARNINGS = 1

_WIDTH = 100
_GROUP_TITLES = {ERROR: "Errors", WARNING: "Warnings", INFO: "Notes"}
_SYNTAX_NAMES = {"toml": "minibroker TOML", "activemq-xml": "ActiveMQ activemq.xml"}


def exit_status(findings: list[Finding]) -> int:
    return WARNINGS if any(f.severity in (ERROR, WARNING) for f in findings) else CLEAN


def _counts(findings: list[Finding]) -> dict[str, int]:
    return {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _wrap(label: str, text: str) -> list[str]:
    return textwrap.wrap(text, _WIDTH, initial_indent=f"    {label}: ", subsequent_indent=" " * (6 + len(label)))


def _finding_lines(f: Finding) -> list[str]:
    label = f.source if f.source in SOURCES else "config"  # a plain misconfiguration or a note
    lines = [f"{f.severity} [{label}] {f.check}: {f.headline}"]
    if f.values:
        lines.append("    values:")
        lines += [f"      {v}" for v in f.values]
    lines += _wrap("why", f.why)
    if f.fix:
        lines += _wrap("fix", f.fix)
    if f.snippet:
        lines += [f"        {line}" if line else "" for line in f.snippet.splitlines()]
    return lines


def format_text(setup: Setup, findings: list[Finding]) -> str:
    counts = _counts(findings)
    lines = [f"minibroker doctor: checking {setup.source} as {_SYNTAX_NAMES.get(setup.syntax.name, setup.syntax.name)}"]
    if not any(counts.values()):
        lines.append("No problems found.")
        return "\n".join(lines)
    lines.append(
        ", ".join([_plural(counts[ERROR], "error"), _plural(counts[WARNING], "warning"), _plural(counts[INFO], "note")])
    )
    for severity in SEVERITIES:
        group = [f for f in findings if f.severity == severity]
        if not group:
            continue
        lines += ["", f"{_GROUP_TITLES[severity]} ({len(group)})"]
        for f in group:
            lines += ["", *_finding_lines(f)]
    cited = sorted({f.source for f in findings if f.source in SOURCES})
    if cited:
        lines += ["", "Sources cited"]
        lines += [f"  {s}: {SOURCES[s].citation()}: {SOURCES[s].trap}" for s in cited]
    return "\n".join(lines)


def format_json(setup: Setup, findings: list[Finding]) -> str:
    return json.dumps(
        {
            "source": setup.source,
            "syntax": setup.syntax.name,
            "status": exit_status(findings),
            "counts": _counts(findings),
            "findings": [f.to_json() for f in findings],
        },
        indent=2,
    )
