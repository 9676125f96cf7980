"""Every lab keeps its promises: ``minibroker lab list`` and ``lab run`` for each,
and its README quotes the run: the output block verbatim, the table of runs and
every output line quoted elsewhere in the text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clients.cli import main as cli
from clients.labs import run_lab
from clients.labs.export import write_export
from clients.labs.readme import quoted_block, run_sections
from clients.labs.replay import replay_document
from clients.sources import SOURCES
from lab_support import LABS, LabResults

#: a number as a README or a run prints it: 1000, 1,088, 0.570, 70 (in 70%)
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def test_every_lab_cites_a_public_source() -> None:
    from clients.doctor.live.fixes import RABBITMQ_SOURCE, SOURCE_OF

    cited = {lab.source for lab in LABS}
    assert cited <= set(SOURCES)
    # a write-up no lab reproduces is one ``doctor --live`` cites (RabbitMQ's own documentation)
    assert set(SOURCES) - cited <= set(SOURCE_OF.values()) | set(RABBITMQ_SOURCE.values())
    assert len({lab.number for lab in LABS}) == len(LABS)
    for lab in LABS:
        readme = (lab.directory / "README.md").read_text(encoding="utf-8")
        assert f'Source: "{SOURCES[lab.source].title.split()[0]}' in readme
        assert not re.search(r"\b\d{3}_[0-9a-f]{16}\.txt\b", readme)  # no private file names


def test_lab_list_names_them_all(capsys) -> None:
    assert cli(["lab", "list"]) == 0
    out = capsys.readouterr().out
    for lab in LABS:
        assert lab.directory.name in out
        assert SOURCES[lab.source].title in out


@pytest.mark.parametrize("lab", LABS, ids=[lab.directory.name for lab in LABS])
def test_lab_verdicts_are_as_promised_and_its_readme_quotes_them(lab, lab_results: LabResults, tmp_path: Path) -> None:
    """Recorded for the console's player as it runs (which changes no verdict), and exported
    as the one file to hand out: under 2 MB."""
    results = lab_results[lab.number]
    lines = lab_results.printed(lab.number)
    assert results and all(r.as_promised for r in results), "\n".join(lines)
    recordings = [r.recording for r in results if r.recording is not None and r.recording.times]
    assert len(recordings) == len(results)
    assert write_export(replay_document(lab, recordings, 1.0), tmp_path / "lab.html") < 2 * 1024 * 1024
    assert {r.outcome.verdict for r in results} == {"pathology", "healthy"}  # both sides shown
    assert lines[-1].startswith(f"Result: {len(results)}/{len(results)}")

    output = "\n".join(lines)
    readme = (lab.directory / "README.md").read_text(encoding="utf-8")
    assert quoted_block(lab, readme) == output, "stale README output: run python -m clients.labs.readme"
    _check_table_of_runs(lab, readme, run_sections(output))
    _check_quoted_lines(readme, output)


def _check_table_of_runs(lab, readme: str, sections: dict[str, str]) -> None:
    """Each number in a run's 'what happens' cell is one that run printed (or one of its configuration)."""
    rows = set()
    for line in readme.splitlines():
        row = re.match(r"\| `?([\w-]+)`? \|(.*)\|\s*$", line)
        if not row or row.group(1) not in sections:
            continue
        rows.add(row.group(1))
        if line in sections[lab.runs[-1].name]:
            continue  # the lab's own table of every run, as the run prints it
        spec = next(s for s in lab.runs if s.name == row.group(1))
        cells = [c.strip() for c in row.group(2).split("|")]
        printed = set(_NUMBER.findall(sections[row.group(1)] + spec.config_path.read_text(encoding="utf-8")))
        quoted = _NUMBER.findall(re.sub(r"`[^`]*`", "", cells[-2]))
        assert not [n for n in quoted if n not in printed], (row.group(1), cells[-2])
    assert rows == {spec.name for spec in lab.runs}


def _check_quoted_lines(readme: str, output: str) -> None:
    """Output lines quoted in the text (verdicts and evidence in fenced blocks) are the run's lines;
    ``...`` stands for a part left out. Sections about live runs quote a live run, whose numbers vary."""
    fenced = live = False
    for line in readme.split("<!-- output of", 1)[0].splitlines():
        if line.startswith("#"):
            live = "live" in line.lower()
        if live:
            continue
        if line.startswith("```"):
            fenced = not fenced
            continue
        text = line.strip()
        if fenced and (text.startswith("- ") or text.startswith("verdict: ")):
            pattern = ".*?".join(re.escape(part) for part in text.split("..."))
            assert re.search(pattern, output), f"quoted, but not what the run prints: {text}"


def test_an_unknown_lab_is_a_clear_error(capsys) -> None:
    assert cli(["lab", "run", "no-such-lab"]) == 2
    assert "no lab 'no-such-lab'; the labs are:" in capsys.readouterr().err


# ------------------------------------------------------------------ live runs


def test_every_lab_runs_live_or_says_why_not(capsys) -> None:
    for lab in LABS:
        assert hasattr(lab.scenario(), "run_live") != bool(lab.no_live), lab.directory.name
    assert cli(["lab", "list"]) == 0
    out = capsys.readouterr().out
    assert out.count("live: yes (--live)") + out.count("live: no: ") == len(LABS)


def test_a_loop_that_runs_late_is_a_machine_too_busy() -> None:
    """LoopLag measures the scheduling delay of the loop it samples: here a callback that
    holds the loop for 0.4 s (what CPU starvation does to every timer of the broker)."""
    import asyncio
    import time

    from clients.labs.looplag import BUSY_SECONDS, LoopLag

    lag = LoopLag()

    async def main() -> None:
        sampler = asyncio.create_task(lag.sample())
        while not lag.samples:  # the sampler is running
            await asyncio.sleep(0.01)
        time.sleep(0.4)  # the loop is held: the sampler's timer fires late
        count = len(lag.samples)
        while len(lag.samples) == count:
            await asyncio.sleep(0.01)
        sampler.cancel()

    asyncio.run(main())
    assert lag.worst() >= 0.4 - LoopLag.INTERVAL > BUSY_SECONDS
    assert lag.busy()
    assert "event loop woke up to" in lag.summary() and "ms late" in lag.summary()


def test_a_run_on_a_busy_machine_says_so() -> None:
    from clients.labs.looplag import LoopLag
    from clients.labs.runner import Outcome, RunResult, _print_result

    spec = LABS[0].runs[0]
    busy, quiet = LoopLag(), LoopLag()
    busy.samples, quiet.samples = [0.0, 1.2, 0.0], [0.0, 0.01]
    lines: list[str] = []
    _print_result(RunResult(spec, Outcome(False, "x"), loop_lag=busy), lines.append)
    assert any(
        line.startswith("    the machine was too busy for a fair run: the broker's event loop woke up to 1200 ms late")
        for line in lines
    ), lines
    lines.clear()
    _print_result(RunResult(spec, Outcome(False, "x"), loop_lag=quiet), lines.append)
    assert any(line.startswith("    machine load: ") for line in lines) and not any(
        "too busy" in line for line in lines
    )


def test_every_lab_but_the_journal_threshold_runs_live() -> None:
    """Lab 04 is the only one without a live run, and ``lab list`` says why (its journal is
    the same files on either clock); every other lab's runs all run live."""
    assert {lab.number for lab in LABS if lab.no_live} == {"04"}
    for lab in LABS:
        if lab.no_live:
            assert "same" in lab.no_live and "files" in lab.no_live, lab.no_live


def _heart_beats_drop_in_time(result) -> None:
    """Lab 03's heart-beats run, live: the consumer left at most two ACKs with the broker (it
    writes the next only once the broker has read the last), and the broker dropped the
    silent connection by the heart-beat timeout within the time its own figures predict."""
    m = result.outcome.metrics
    assert m["held_acks"] <= 2, m
    text = "\n".join(result.outcome.evidence)
    assert "the broker ended the old connection: ERROR 'heart-beat timeout: nothing received for" in text
    assert m["dropped_after_s"] is not None and m["dropped_after_s"] <= m["expected_drop_s"] + 2.0, m


def _slow_policies_act(result) -> None:
    """Lab 02, live: each policy leaves its own trace in the broker, as on the virtual clock."""
    m, name = result.outcome.metrics, result.spec.name
    text = "\n".join(result.outcome.evidence)
    if name == "block":
        assert m["flow_blocks"] > 0 and "Pending message cursor [VMPendingMessageCursor] is full" in text
    elif name == "spool":
        assert m["temp_peak_kb"] > 0 and "swap_out of" in text
    elif name.startswith("discard"):
        assert m["discarded"] > 0 and m["backlog"] <= 100
    elif name.startswith("abort"):
        assert m["aborted"] == 1 and "subscription slow to /topic/ticks aborted" in text
    elif name == "stuck-socket":
        assert "blocked to the end" in text and "the stuck one:" in text
    else:
        assert "write_timeout for session" in text and m["aborted"] == 1


def _journal_kept_or_freed(result) -> None:
    """Lab 06, live: a held shop faces a full store of 16 files kept for at most a handful of
    live messages, and its producer is parked; a cure leaves a store at most half full (a shop
    that reached its last order ends with the acks of the last 0.2 s not yet written)."""
    m = result.outcome.metrics
    text = "\n".join(result.outcome.evidence)
    if result.spec.expect == "pathology":
        assert m["store_pct"] == 100 and m["files"] == 16 and m["pinned_files"] <= m["held"] <= 10, m
        assert "blockedProducers 0" not in text and "pinned by: " in text
    else:
        assert m["store_pct"] < 50 and m["files"] <= 8 and m["waited"] <= 1.0, m
    if result.spec.name == "drained":
        assert 'pinned by: 2 "/queue/audit"' in text and "the operator drains /queue/audit: 1 message read" in text


#: What each live run must show beyond its verdict (when the machine gave it a fair run).
LIVE_EVIDENCE = (
    {("03", "heart-beats"): _heart_beats_drop_in_time}
    | {("06", spec.name): _journal_kept_or_freed for lab in LABS if lab.number == "06" for spec in lab.runs}
    | {("02", spec.name): _slow_policies_act for lab in LABS if lab.number == "02" for spec in lab.runs}
)


@pytest.mark.slow
@pytest.mark.timeout(900)  # lab 02's eight runs are 10 s of wall clock each, more on a loaded machine
@pytest.mark.parametrize("lab", [lab for lab in LABS if not lab.no_live], ids=lambda lab: lab.directory.name)
def test_every_live_run_keeps_its_promise(lab) -> None:
    """Every run of every lab that runs live, against the real server on real sockets. A run
    on a machine too busy for a fair run (its broker's loop woke up late) must say so."""
    lines: list[str] = []
    results = run_lab(lab, live=True, out=lines.append)
    assert len(results) == len(lab.runs)
    for result in results:
        assert result.loop_lag is not None and result.loop_lag.samples  # the load was measured
        if not result.as_promised:
            assert result.too_busy, "\n".join(lines)
            assert any(line.startswith("    the machine was too busy for a fair run") for line in lines)
        elif not result.too_busy and (lab.number, result.spec.name) in LIVE_EVIDENCE:
            LIVE_EVIDENCE[lab.number, result.spec.name](result)
