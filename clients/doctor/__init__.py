"""``minibroker doctor``: warn about each documented trap before it springs.

Reads our TOML configuration (or a subset of ActiveMQ's ``activemq.xml``),
maps it onto one model (``model.Setup``), runs the checks (``checks.CHECKS``)
and reports findings grouped by severity, each with the public document it comes from,
the values that trigger it, why, and the fix in the input's own syntax.

    setup = read("activemq.xml")
    findings = run_checks(setup)
    print(format_text(setup, findings)); status = exit_status(findings)

Modules: ``model`` (Setup, Finding, Change), ``read_toml`` / ``read_xml``
and ``reader`` (input), ``spell_toml`` / ``spell_xml`` (names, values and
fixes in each syntax), ``checks_*`` (the rules, by source), ``checks`` (the
list), ``report`` (text, JSON, exit status). The rules are in docs/doctor.md.
"""

from __future__ import annotations

from .checks import CHECKS, run_checks
from .model import ERROR, INFO, WARNING, Change, DoctorError, Finding, Setup
from .reader import read
from .report import exit_status, format_json, format_text

__all__ = [
    "CHECKS",
    "ERROR",
    "INFO",
    "WARNING",
    "Change",
    "DoctorError",
    "Finding",
    "Setup",
    "exit_status",
    "format_json",
    "format_text",
    "read",
    "run_checks",
]
