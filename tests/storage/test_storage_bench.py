"""The benchmark script runs end to end (its numbers are printed, never asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.bench_journal import main


def test_bench_runs_every_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--records", "2000", "--fsyncs", "5", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    for section in ("appends", "pairs", "sync/msg", "group", "recovery", "threshold"):
        assert f"\n{section} " in f"\n{out}"
    assert 'Enqueue capacity threshold exceeded on queue "Durable".' in out
    assert "7 live" in out
    assert list(tmp_path.iterdir()) == []  # it cleans up after itself
