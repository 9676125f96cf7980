"""The labs' figures say what the story is about: every session of a client counted, the
socket backlog and the refused reconnects of a stalled socket, which queue holds the memory,
and no label over a title."""

from __future__ import annotations

from pathlib import Path

from clients.labs import find_labs, run_lab
from clients.labs.figure import lab_figure, queue_shares

LABS = {lab.number: lab for lab in find_labs()}


def _figure(number: str, tmp_path: Path, capture: list | None = None):
    lab = LABS[number]
    results = run_lab(lab, out=lambda line: None, plot_dir=tmp_path, specs=[lab.run_named(n) for n in lab.figure])
    if capture is None:
        return results, lab_figure(lab, results, tmp_path)
    import matplotlib.pyplot as plt

    close = plt.close
    plt.close = lambda fig=None: capture.append(fig)  # keep the figure to measure it
    try:
        return results, lab_figure(lab, results, tmp_path)
    finally:
        plt.close = close


def test_a_client_that_reconnects_is_one_consumer_before_the_busiest_are_kept(tmp_path: Path) -> None:
    """Lab 04's receivers use 19 short-lived connections, all named "receiver": the figure's
    receiver line counts every message any of them received (it counted 654 of 1,001)."""
    lab = LABS["04"]
    (result,) = run_lab(lab, out=lambda line: None, plot_dir=tmp_path, specs=[lab.run_named("priority")])
    series = result.series
    receivers = {session for session, name in series["names"].items() if name == "receiver"}
    assert len(receivers) > 12
    drawn = sum(r["received"] for r in series["consumer_rates"] if r["consumer"] in receivers)
    trace = result.trace_file.read_text(encoding="utf-8")
    import json

    dispatched = sum(
        1 for line in trace.splitlines() if (e := json.loads(line))["event"] == "dispatch" and e["session"] in receivers
    )
    assert drawn == dispatched > 900


def test_lab_03s_figure_shows_the_socket_backlog_and_the_refused_reconnects(tmp_path: Path) -> None:
    figures: list = []
    _, drawn = _figure("03", tmp_path, figures)
    assert drawn is not None
    _no_label_over_a_title(figures)
    assert drawn.bottom["default-prefetch"] == ["KB queued for perl-consumer's socket", "reconnect refused"]
    assert "reconnect refused" not in drawn.bottom["prefetch-1"]


def test_lab_00s_figure_shows_which_queue_holds_the_memory(tmp_path: Path) -> None:
    figures: list = []
    results, drawn = _figure("00", tmp_path, figures)
    assert drawn is not None
    _no_label_over_a_title(figures)
    legacy, cure = results
    assert "/queue/B.1: share of broker memory %" in drawn.bottom["restart-legacy"]
    shares = {label.split(":")[0]: max(ys) for label, _, ys in queue_shares(legacy, 10.0)}
    assert shares["/queue/B.1"] >= 65  # the backlog holds the broker's memory
    cured = {label.split(":")[0]: max(ys) for label, _, ys in queue_shares(cure, 10.0)}
    assert max(cured.values()) <= 10  # each backlog held to its own limit


def _no_label_over_a_title(figures: list) -> None:
    """Every text drawn on an axis (a finding's name, a line's total) clear of every title."""
    assert figures
    for fig in figures:
        renderer = fig.canvas.get_renderer()
        titles = [ax.title for ax in fig.axes if ax.title.get_text()]
        titles += [fig._suptitle] if fig._suptitle is not None else []
        for ax in fig.axes:
            for text in ax.texts:
                box = text.get_window_extent(renderer)
                assert not any(box.overlaps(t.get_window_extent(renderer)) for t in titles), text.get_text()
