// The lab player: a lab's recorded runs (clients/labs/recording.py) played with this
// page's own clock, so every page has its own position.
//
// - The runs lie end to end on one timeline; each takes its recorded seconds plus
//   RUN_GAP, during which its last sample (what the run left behind) stays shown.
// - A position shows the last sample at or before it; Step and Step back go from one
//   recorded event to the next, and show the very sample the event was made at
//   (several samples can share one instant: a run does much at t=0).
// - Columns come as a list (one value per sample) or {all: value} (never changed).
'use strict';

(function () {
  const RUN_GAP = 1.0;                    // lab seconds between one run's end and the next's start
  const SPEEDS = [0.25, 0.5, 1, 2, 4, 8, 16];

  const column = (c, n) => (Array.isArray(c) ? c : Array.from({ length: n }, () => c.all));

  function expandRun(raw, index, start) {
    const n = raw.t.length;
    const expand = (cols) => Object.fromEntries(Object.entries(cols).map(([k, c]) => [k, column(c, n)]));
    return {
      index, start, name: raw.name, about: raw.about, expect: raw.expect, verdict: raw.verdict,
      summary: raw.summary, duration: raw.duration, span: raw.duration + RUN_GAP, t: raw.t,
      broker: expand(raw.broker), diagnosis: column(raw.diagnosis, n), findings: raw.findings,
      destinations: Object.entries(raw.destinations).map(([name, cols]) => ({ name, cols: expand(cols) })),
      events: raw.events,
    };
  }

  // The last index i with times[i] <= t (0 if none).
  function lastAtOrBefore(times, t) {
    let lo = 0, hi = times.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (times[mid] <= t + 1e-9) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  class Player {
    constructor(doc) {
      this.lab = doc.lab;
      this.speed = doc.speed || 1;
      let start = 0;
      this.runs = doc.runs.map((raw, i) => { const run = expandRun(raw, i, start); start += run.span; return run; });
      this.total = start;
      // Every event, in timeline order (a run's are in order already, and the runs are).
      this.events = this.runs.flatMap((run) => run.events.map((e) => ({ ...e, run: run.index, at: run.start + e.t })));
      this.playing = false;
      this.restart();
    }

    restart() { this.position = 0; this.pinned = { run: 0, sample: 0 }; this.passed = -1; }

    runAt(position) {
      let i = this.runs.length - 1;
      while (i > 0 && this.runs[i].start > position + 1e-9) i--;
      return this.runs[i];
    }

    // What is shown now: the run, the sample, the run's own seconds.
    where() {
      if (this.pinned) {
        const run = this.runs[this.pinned.run];
        return { run, sample: this.pinned.sample, local: this.position - run.start };
      }
      const run = this.runAt(this.position);
      const local = this.position - run.start;
      return { run, sample: lastAtOrBefore(run.t, local), local };
    }

    seek(position) {
      this.position = Math.max(0, Math.min(this.total, position));
      this.pinned = null;
      this.passed = -1;
      while (this.passed + 1 < this.events.length && this.events[this.passed + 1].at <= this.position + 1e-9) this.passed++;
    }

    advance(seconds) {
      if (!this.playing) return false;
      const before = this.position;
      this.seek(this.position + seconds * this.speed);
      if (this.position >= this.total) this.playing = false;
      return this.position !== before || !this.playing;
    }

    play() { if (this.position >= this.total) this.restart(); this.playing = true; }
    pause() { this.playing = false; }

    goTo(k) {
      const e = this.events[k];
      this.playing = false;
      this.position = e.at;
      this.pinned = { run: e.run, sample: e.sample };
      this.passed = k;
    }

    step() { if (this.passed + 1 < this.events.length) this.goTo(this.passed + 1); else this.pause(); }

    stepBack() {
      const onEvent = this.pinned && this.passed >= 0 && this.events[this.passed].at === this.position;
      const k = onEvent ? this.passed - 1 : this.passed;
      if (k >= 0) this.goTo(k); else { this.pause(); this.restart(); }
    }

    // The broker, its destinations and the run's history up to now, shaped as the
    // broker's own statistics (stats.py), so the page draws them as it draws a live broker.
    view() {
      const { run, sample: s, local } = this.where();
      const broker = Object.fromEntries(Object.entries(run.broker).map(([k, v]) => [k, v[s]]));
      broker.diagnosis = run.diagnosis[s].map((i) => run.findings[i]);
      const destinations = run.destinations.filter((d) => d.cols.present[s]).map((d) => ({
        destinationName: d.name,
        ...Object.fromEntries(Object.entries(d.cols).map(([k, v]) => [k, v[s]])),
        consumers: [],
      }));
      const upTo = (series) => series.slice(0, s + 1);
      const history = {
        t: upTo(run.t), in: upTo(run.broker.enqueueRate), out: upTo(run.broker.dequeueRate),
        ready: upTo(run.broker.readyCount), unacked: upTo(run.broker.inflightCount), memory: upTo(run.broker.memoryPercentUsage),
      };
      const destHistory = new Map(run.destinations.map((d) => [d.name, {
        t: upTo(run.t), memory: upTo(d.cols.memoryPercentUsage), size: upTo(d.cols.size),
      }]));
      const events = this.events.slice(0, this.passed + 1).filter((e) => e.run === run.index);
      return { run, sample: s, local: Math.min(local, run.duration), broker, destinations, history, destHistory, events };
    }
  }

  // The windows in which a run's producers were blocked, in the run's seconds.
  function blockedWindows(run) {
    const windows = [];
    let since = null;
    run.broker.blockedProducers.forEach((n, i) => {
      if (n > 0 && since === null) since = run.t[i];
      if (n === 0 && since !== null) { windows.push([since, run.t[i]]); since = null; }
    });
    if (since !== null) windows.push([since, run.duration]);
    return windows;
  }

  window.MinibrokerPlayer = { Player, SPEEDS, RUN_GAP, blockedWindows };
})();
