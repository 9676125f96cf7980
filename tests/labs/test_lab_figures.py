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


def test_a_run_with_two_findings_names_both_apart_and_clear_of_the_titles(tmp_path: Path) -> None:
    """Lab 01's deadlock run has two slow-consumer findings over nearly the same window: their
    names were printed one over the other, in its per-run plots and in the lab's figure."""
    figures: list = []
    results, drawn = _figure("01", tmp_path, figures)
    assert drawn is not None
    assert len([f for f in results[0].findings if f["detector"] == "slow_consumer"]) == 2
    assert {"rates.png", "consumers.png"} <= {p.name for p in (tmp_path / "deadlock").glob("*.png")}
    named = [t.get_text() for fig in figures for ax in fig.axes for t in ax.texts]
    assert {"slow consumer: slow-1", "slow consumer: slow-2"} <= set(named)
    _no_label_over_a_title(figures)


def test_findings_over_one_window_with_long_names_stay_below_the_title(tmp_path: Path) -> None:
    """Two findings over the same window: the second name was stacked into the plot's title."""
    import matplotlib.pyplot as plt

    from clients.spark import plots

    long = "a-consumer-with-a-long-client-name"
    series = {
        "consumer_rates": [{"t": 0.0, "consumer": "s1", "sub": "1", "received": 5}],
        "subscriptions": [{"session": "s1", "sub": "1"}],
        "names": {"s1": long},
    }
    findings = [
        {"detector": detector, "start": 1.0, "end": 5.0, "session": "s1"}
        for detector in ("slow_consumer", "stalled_socket", "starved_consumer")
    ]
    figures: list = []
    close = plt.close
    plt.close = lambda fig=None: figures.append(fig)
    try:
        with plots.classroom():
            assert plots.consumers(tmp_path, series, 1.0, 10.0, findings) == "consumers.png"
    finally:
        plt.close = close
    assert [t.get_text() for t in figures[0].axes[0].texts if long in t.get_text()] == [
        f"slow consumer: {long}",
        f"stalled socket: {long}",
        f"starved consumer: {long}",
    ]
    _no_label_over_a_title(figures)


def _no_label_over_a_title(figures: list) -> None:
    """Every text drawn on an axis (a finding's name, a line's total) clear of every title and
    of every other text of its axis."""
    assert figures
    for fig in figures:
        renderer = fig.canvas.get_renderer()
        titles = [ax.title for ax in fig.axes if ax.title.get_text()]
        titles += [fig._suptitle] if fig._suptitle is not None else []
        for ax in fig.axes:
            boxes = []
            for text in ax.texts:
                box = text.get_window_extent(renderer)
                assert not any(box.overlaps(t.get_window_extent(renderer)) for t in titles), text.get_text()
                assert not any(box.overlaps(other) for _, other in boxes), (text.get_text(), [n for n, _ in boxes])
                boxes.append((text.get_text(), box))
