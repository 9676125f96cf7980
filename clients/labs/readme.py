"""A lab README's quoted numbers come from the run itself.

Each lab's README ends with the output of ``minibroker lab run NN`` verbatim,
between two markers; the virtual clock repeats exactly, so that block is the
output a reader gets. ``python -m clients.labs.readme`` rewrites the block of
every lab (``--check``: only say which are stale, exit 1 if any), and the
tests compare each block with a fresh run. ``run_sections`` splits an output
into its runs, so a test can check that the numbers the README's table of
runs quotes are the ones that run printed.
"""

from __future__ import annotations

import argparse
import re
import sys

from .model import Lab, find_labs
from .runner import run_lab

__all__ = ["BEGIN", "END", "lab_output", "quoted_block", "replace_block", "run_sections", "main"]

BEGIN = "<!-- output of `minibroker lab run {number}`, written by `python -m clients.labs.readme`: do not edit -->"
END = "<!-- end of output -->"


def lab_output(lab: Lab) -> str:
    """What ``minibroker lab run`` prints for ``lab`` on the virtual clock."""
    lines: list[str] = []
    run_lab(lab, out=lines.append)
    return "\n".join(lines)


def _block(lab: Lab, output: str) -> str:
    return f"{BEGIN.format(number=lab.number)}\n```text\n{output}\n```\n{END}"


def quoted_block(lab: Lab, text: str) -> str | None:
    """The output the README ``text`` quotes, or None when it has no block."""
    start = text.find(BEGIN.format(number=lab.number))
    if start < 0:
        return None
    body = text[start : text.index(END, start)].split("\n", 1)[1]
    return body.removeprefix("```text\n").rstrip("\n").removesuffix("```").rstrip("\n")


def replace_block(lab: Lab, text: str, output: str) -> str:
    """``text`` with its output block replaced by ``output`` (appended under a heading if missing)."""
    block = _block(lab, output)
    start = text.find(BEGIN.format(number=lab.number))
    if start < 0:
        return text.rstrip("\n") + "\n\n## The run, verbatim\n\n" + block + "\n"
    end = text.index(END, start) + len(END)
    return text[:start] + block + text[end:]


def run_sections(output: str) -> dict[str, str]:
    """The output of each run (``[name] ...`` up to the next run), by run name."""
    sections: dict[str, str] = {}
    name = None
    for line in output.splitlines():
        match = re.match(r"  \[([\w-]+)\] ", line)
        if match:
            name = match.group(1)
            sections[name] = ""
        elif line.startswith("Result: "):
            name = None
        if name is not None:
            sections[name] += line + "\n"
    return sections


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale READMEs (exit 1 if any)")
    args = parser.parse_args(argv)
    stale = 0
    for lab in find_labs():
        path = lab.directory / "README.md"
        text = path.read_text(encoding="utf-8")
        output = lab_output(lab)
        if quoted_block(lab, text) == output:
            continue
        stale += 1
        if args.check:
            print(f"{path}: the quoted output differs from the run's")
        else:
            path.write_text(replace_block(lab, text, output), encoding="utf-8")
            print(f"{path}: output rewritten")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
