// minibroker's web console. Everything it shows and does goes over STOMP, through the
// broker's own WebSocket endpoint (/stomp on this port), as any client's would:
// statistics are requests to /queue/ActiveMQ.Statistics.* and operations to
// /queue/ActiveMQ.Admin.* (docs/admin.md), answered in JSON on this page's
// temporary queue. It polls every second and keeps the last minutes for the charts.
// A lab's replay (lab run --console, or the file lab run --export writes) is played
// by the page itself (player.js): the recorded statistics, drawn as a live broker's.
'use strict';

const POLL_MS = 1000;
const HISTORY_POINTS = 300;               // five minutes at one sample a second
const REPLY_TO = '/temp-queue/console';
const REQUEST_TIMEOUT_MS = 10000;
const DEFAULT_HIGH_WATER_MARK = 70;       // the cursor memory high-water mark's default, percent

const state = {
  client: null, connected: false, credentials: {}, polling: false, seq: 0,
  pending: new Map(),                     // correlation-id -> {replies, resolve, reject, statistics}
  broker: null, destinations: [], connections: [],
  operations: [],                         // what Whoami says this user may send
  whoamiRefused: false,                   // a broker without Whoami: offer no operation, ask no more
  sort: { key: 'destinationName', dir: 1 },
  history: { t: [], in: [], out: [], ready: [], unacked: [], memory: [] },
  destHistory: new Map(),                 // address -> {t, memory, size}
  charts: {}, route: { page: 'overview' }, messages: null,
  asked: new Map(),                       // statistics asked for and not answered yet -> when asked
  listsLoaded: false,                     // the destinations and connections answered at least once
  player: null, view: null,               // a lab's replay: its player and what it shows now
  loadingReplay: null,                    // how many recorded runs are on their way
};
window.minibrokerConsole = state;         // for the browser tests (and curious users)

// ---------------------------------------------------------------- formatting
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(c ?? ''));
  return node;
}
function bytes(n) {
  if (n === undefined || n === null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
const num = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en'));
const rate = (n) => (n === undefined || n === null ? '–' : Number(n).toFixed(1));
// A replay shows a recording: no operation acts on it.
const can = (op) => !state.player && state.operations.includes(op);
// "1 connection", "2 connections": the word for n things (its plural given when not word + s).
const counted = (n, word, words) => (n === 1 ? word : words || `${word}s`);
const pctOf = (d) => d.memoryPercentUsage ?? 0;

// ---------------------------------------------------------------- notices
function notice(text, kind) {
  const box = el('div', { class: `notice ${kind || ''}` }, text);
  $('notices').append(box);
  setTimeout(() => box.remove(), 8000);
}

// ---------------------------------------------------------------- STOMP
function connect() {
  if (state.client) state.client.deactivate();
  state.whoamiDone = false;               // what this user may do: asked again once connected
  state.loginRefused = null;
  setStatus(false, state.credentials.login ? `logging in as ${state.credentials.login}…` : 'connecting…');
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const client = new StompJs.Client({
    brokerURL: `${scheme}://${location.host}/stomp`,
    connectHeaders: { host: 'localhost', ...state.credentials },
    heartbeatIncoming: 10000, heartbeatOutgoing: 10000,
    reconnectDelay: 2000,
    debug: () => {},
  });
  // A client replaced (a new login) may still report its end: only the current one speaks.
  const current = () => state.client === client;
  client.onConnect = () => {
    if (!current()) return;
    state.connected = true;
    state.needLogin = false;
    setStatus(true, `connected${state.credentials.login ? ` as ${state.credentials.login}` : ''}`);
    client.subscribe(REPLY_TO, onReply, { id: 'console' });
    render();  // the loading page says what it waits for now
    whoami();
    poll();
  };
  client.onStompError = (frame) => {
    if (!current()) return;
    const message = frame.headers.message || 'the broker refused';
    if (!state.connected) {  // CONNECT refused: a login is needed (or a wrong one was given)
      state.needLogin = true;
      state.loginRefused = message;
      setStatus(false, 'log in to see the broker');
      client.deactivate();
      render();
    } else {
      notice(`ERROR from the broker: ${message}`);
    }
    failPending(message);
  };
  client.onWebSocketClose = () => {
    if (!current()) return;
    state.connected = false;
    setStatus(false, state.needLogin ? 'log in to see the broker' : 'disconnected, reconnecting…');
    failPending('the connection closed');
    render();
  };
  state.client = client;
  client.activate();
}

function setStatus(ok, text) {
  const s = $('status');
  s.className = `status ${ok ? 'ok' : 'down'}`;
  s.textContent = text;
}

function failPending(reason) {
  for (const p of state.pending.values()) p.reject(new Error(reason));
  state.pending.clear();
  state.polling = false;
}

function onReply(message) {
  const id = message.headers['correlation-id'];
  const p = state.pending.get(id);
  if (!p) return;
  const body = JSON.parse(message.body || '{}');
  if (!p.statistics) { state.pending.delete(id); p.resolve(body); return; }
  const total = Number(message.headers['statistics-total']);
  if (Number(message.headers['statistics-index']) >= 0) p.replies.push(body);
  if (p.replies.length >= total) { state.pending.delete(id); p.resolve(p.replies); }
}

// A request over STOMP: a SEND with reply-to and correlation-id; the answer is a promise.
function request(destination, headers, statistics) {
  return new Promise((resolve, reject) => {
    if (!state.connected) { reject(new Error('not connected')); return; }
    const id = `c${++state.seq}`;
    state.pending.set(id, { replies: [], resolve, reject, statistics });
    setTimeout(() => {  // an answer that never comes must not stop the polling
      if (state.pending.delete(id)) reject(new Error(`no answer from ${destination} within ${REQUEST_TIMEOUT_MS / 1000} s`));
    }, REQUEST_TIMEOUT_MS);
    state.client.publish({ destination, body: '', headers: { 'reply-to': REPLY_TO, 'correlation-id': id, ...headers } });
  });
}
function statistics(what) {
  state.asked.set(what, Date.now());      // the loading state says what it waits for, and since when
  const answered = request(`/queue/ActiveMQ.Statistics.${what}`, {}, true);
  const settled = () => { state.asked.delete(what); };
  answered.then(settled, settled);
  return answered;
}

// An admin operation (docs/admin.md). A refusal is an ERROR, which closes the
// connection: the page says so and reconnects.
function admin(operation, headers) {
  return request(`/queue/ActiveMQ.Admin.${operation}`, headers, false);
}
state.admin = admin;

async function whoami() {
  if (state.whoamiRefused) return;
  try {
    const me = await admin('Whoami', {});
    state.operations = me.operations || [];
    state.ownConnection = me.connection;
  } catch (e) {
    state.operations = [];
    state.whoamiRefused = /whoami/i.test(e.message);
  }
  state.whoamiDone = true;
  render();
}

async function poll() {
  if (!state.connected || state.polling || state.player) return;
  state.polling = true;
  try {
    const lists = Promise.all([statistics('Destination.>'), statistics('Connection')]);
    lists.catch(() => {});                // its failure is the one awaited below
    const [broker] = await statistics('Broker');
    if (broker.replay) { await loadReplay(broker.replay); return; }
    state.broker = broker;
    render();                             // the overview as soon as the broker answers
    const [destinations, connections] = await lists;
    state.destinations = destinations;
    state.connections = connections;
    state.listsLoaded = true;
    remember(broker, destinations);
    render();
  } catch (e) {
    // a closed connection: the reconnect starts polling again
  } finally {
    state.polling = false;
  }
}
setInterval(poll, POLL_MS);
setInterval(() => { if (!state.broker) route(); }, 1000);  // the loading state counts the seconds waited

// ---------------------------------------------------------------- a lab's replay
// The broker serving a replay says so in its statistics; the page then asks for the
// recorded runs once and plays them itself (player.js): its own clock, its own position.
async function loadReplay(meta) {
  if (state.loadingReplay) return;
  state.loadingReplay = meta.runs;
  route();
  try {
    startPlayer({ lab: meta.lab, speed: meta.speed, runs: await statistics('Replay') });
    // The page has all it plays: it needs the broker no more (which may stop when the class is done).
    const client = state.client;
    state.client = null;
    state.connected = false;
    client.deactivate();
    setStatus(true, 'the replay is in this page');
  } finally {
    state.loadingReplay = null;
  }
}

let lastTick = performance.now();
function startPlayer(doc) {
  state.player = new window.MinibrokerPlayer.Player(doc);
  document.title = `minibroker: lab ${doc.lab.name}`;
  $('footer').textContent = `Lab ${doc.lab.name}: ${doc.lab.title}. Source: ${doc.lab.source}. `
    + "Every figure is the broker's own statistics, recorded while the lab ran and played back in this page.";
  buildPlayer();
  state.player.play();
  lastTick = performance.now();
  showPlayer();
}
setInterval(() => {
  const now = performance.now();
  const seconds = (now - lastTick) / 1000;
  lastTick = now;
  if (state.player && state.player.advance(seconds)) showPlayer();
}, 100);

function showPlayer() {
  const p = state.player, v = p.view();
  state.view = v;
  state.broker = { ...v.broker, brokerName: `replay of lab ${p.lab.name}` };
  state.destinations = v.destinations;
  state.connections = [];
  state.listsLoaded = true;
  state.history = v.history;
  state.destHistory = v.destHistory;
  render();
}

const percentOf = (t) => `${(100 * t) / state.player.total}%`;
const cssName = (text) => String(text || 'none').toLowerCase().replace(/[^a-z0-9]+/g, '-');

function buildPlayer() {
  const p = state.player;
  const control = (name, symbol, action, key) => el('button', {
    type: 'button', 'aria-label': name, title: `${name} (key: ${key})`, 'data-control': name,
    onclick: () => { action(); lastTick = performance.now(); showPlayer(); },
  }, el('span', { class: 'symbol', 'aria-hidden': 'true' }, symbol), ` ${name}`);
  const speeds = [...new Set([...window.MinibrokerPlayer.SPEEDS, p.speed])].sort((a, b) => a - b);
  const runs = p.runs.map((run) => el('div', {
    class: `phase run verdict-${cssName(run.verdict)}`, 'data-phase': run.name, 'data-run': run.index, 'data-verdict': run.verdict,
    style: `left:${percentOf(run.start)};width:${percentOf(run.span)}`,
    title: `run ${run.index + 1}: ${run.name}: ${run.verdict} (${run.duration.toFixed(1)} lab seconds)`,
    onclick: (event) => { event.stopPropagation(); p.seek(run.start); showPlayer(); },
  }, el('span', { class: 'name' }, run.name), el('span', { class: 'grade' }, String(run.verdict).toUpperCase())));
  const blocked = p.runs.flatMap((run) => window.MinibrokerPlayer.blockedWindows(run).map(([a, b]) => el('div', {
    class: 'phase blocked', style: `left:${percentOf(run.start + a)};width:${percentOf(Math.max(b - a, 0.05))}`,
    title: `${run.name}: producer blocked ${a.toFixed(1)}–${b.toFixed(1)} s`,
  })));
  const ticks = p.events.filter((e) => e.kind !== 'run').map((e) => el('div', {
    class: `tick ${e.kind}`, style: `left:${percentOf(e.at)}`, title: `${e.t.toFixed(1)} s: ${e.text}`,
  }));
  $('player').replaceChildren(
    el('div', { class: 'controls' },
      control('Restart', '|◀', () => p.restart(), 'Home'), control('Step back', '◀|', () => p.stepBack(), '←'),
      control('Play', '▶', () => p.play(), 'space'), control('Pause', '❚❚', () => p.pause(), 'space'),
      control('Step', '▶|', () => p.step(), '→'),
      el('input', { type: 'range', id: 'replay-slider', 'aria-label': 'Position', min: 0, max: p.total, step: 0.01, value: 0,
        oninput: (event) => { p.seek(Number(event.target.value)); showPlayer(); } }),
      el('label', { class: 'speed' }, 'Speed ', el('select', { id: 'replay-speed', 'aria-label': 'Speed',
        onchange: (event) => { p.speed = Number(event.target.value); showPlayer(); } },
        ...speeds.map((x) => el('option', { value: x, selected: x === p.speed }, `${x}×`))))),
    el('div', { class: 'label' }, el('b', { id: 'replay-run' }), el('span', { id: 'replay-position' })),
    el('div', { class: 'track', id: 'replay-track',
      onclick: (event) => {
        const box = event.currentTarget.getBoundingClientRect();
        p.seek((p.total * (event.clientX - box.left)) / box.width);
        showPlayer();
      } }, ...runs, ...blocked, ...ticks, el('div', { class: 'cursor', id: 'replay-cursor' })),
    el('div', { id: 'replay-about', class: 'about' }),
    el('ol', { class: 'events', id: 'replay-events' }));
  $('player').hidden = false;
  $('nav-connections').hidden = true;     // a recording keeps no connection
}

// The keys a teacher reaches for: space plays or pauses, the arrows step, Home restarts.
document.addEventListener('keydown', (event) => {
  const p = state.player;
  if (!p || event.ctrlKey || event.metaKey || event.altKey || /^(INPUT|SELECT|TEXTAREA)$/.test(event.target.tagName)) return;
  const action = { ' ': () => (p.playing ? p.pause() : p.play()), ArrowRight: () => p.step(),
    ArrowLeft: () => p.stepBack(), Home: () => p.restart() }[event.key];
  if (!action) return;
  event.preventDefault();
  action();
  lastTick = performance.now();
  showPlayer();
});

function updatePlayer(v) {
  const p = state.player, run = v.run;
  const box = $('player');
  box.dataset.position = p.position.toFixed(3);
  box.dataset.run = run.name;
  box.dataset.sample = v.sample;
  box.dataset.playing = p.playing;
  $('replay-slider').value = p.position;
  $('replay-cursor').style.left = percentOf(p.position);
  for (const seg of box.querySelectorAll('.phase.run')) seg.classList.toggle('current', Number(seg.dataset.run) === run.index);
  box.querySelector('[data-control="Play"]').disabled = p.playing;
  box.querySelector('[data-control="Pause"]').disabled = !p.playing;
  $('replay-run').textContent = `Run ${run.index + 1} of ${p.runs.length}: ${run.name}`;
  $('replay-position').textContent = `${v.local.toFixed(1)} of ${run.duration.toFixed(1)} lab seconds`
    + ` · ${p.speed}× · ${p.playing ? 'playing' : p.position >= p.total ? 'ended' : 'paused'}`;
  const ended = v.local >= run.duration && v.sample === run.t.length - 1;
  $('replay-about').replaceChildren(el('span', {}, run.about),
    el('span', { class: `grade verdict-${cssName(run.verdict)}`, 'data-verdict': run.verdict },
      ended ? `verdict: ${String(run.verdict).toUpperCase()}: ${run.summary}` : `expected: ${String(run.expect).toUpperCase()}`));
  const current = p.events[p.passed];
  $('replay-events').replaceChildren(...v.events.slice(-5).map((e) => el('li', {
    class: `${e.kind} ${e === current && p.pinned ? 'current' : ''}`, 'data-kind': e.kind,
  }, el('span', { class: 'at' }, `${e.t.toFixed(1)} s`), ` ${e.text}`)));
}

function push(series, value) {
  series.push(value);
  if (series.length > HISTORY_POINTS) series.shift();
}

function remember(broker, destinations) {
  const h = state.history;
  const t = (broker.timestamp || Date.now()) / 1000;
  push(h.t, t);
  push(h.in, broker.enqueueRate ?? null);
  push(h.out, broker.dequeueRate ?? null);
  push(h.ready, broker.readyCount ?? broker.size);
  push(h.unacked, broker.inflightCount ?? null);
  push(h.memory, broker.memoryPercentUsage);
  for (const d of destinations) {
    let dh = state.destHistory.get(d.destinationName);
    if (!dh) { dh = { t: [], memory: [], size: [] }; state.destHistory.set(d.destinationName, dh); }
    push(dh.t, t); push(dh.memory, pctOf(d)); push(dh.size, d.size);
  }
}

// ---------------------------------------------------------------- rendering
function render() {
  route();
  const b = state.broker;
  if (!b) return;
  $('broker-name').textContent = b.brokerName;
  if (state.player) updatePlayer(state.view);  // on every page: the player is above them all
  renderBanners(b.diagnosis || []);
  if (state.route.page === 'overview') renderOverview(b);
  else if (state.route.page === 'connections') renderConnections();
  else renderDestination(state.route.name);
}

function renderBanners(findings) {
  $('banners').replaceChildren(...findings.map((f) => el('div', { class: 'banner', 'data-pathology': f.pathology },
    el('b', {}, f.summary), el('div', { class: 'cure' }, `Cure: ${f.cure}`))));
}

// A usage can pass 100%: the broker's own figure, which a class should read as it is meant.
const OVER_LIMIT = {
  memory: 'over its limit: a cursor below its high-water mark pages in a whole batch (max_page_size messages) '
    + 'at once, as ActiveMQ does, and memory already held is not given back',
  store: 'over its limit: the journal counts each of its files at their preallocated size, '
    + 'so the first message of a new file takes a whole file',
  temp: 'over its limit: the temp store counts each of its files whole and never deletes the one it writes, '
    + 'so a limit below one file is passed by the first message swapped',
};
const pctText = (pct) => (pct > 100 ? `${pct}% (over its limit)` : `${pct}%`);

function usageBar(target, title, used, limit, pct, mark, meaning = OVER_LIMIT.memory) {
  const fill = el('div', { class: `fill ${pct >= 100 ? 'full' : pct >= (mark || 101) ? 'high' : ''}`, style: `width:${Math.min(pct, 100)}%` });
  const bar = el('div', { class: 'bar', role: 'meter', 'aria-valuenow': pct, 'aria-valuemin': 0, 'aria-valuemax': 100 }, fill);
  if (mark) bar.append(el('div', { class: 'mark', style: `left:${mark}%`, title: 'the cursor high-water mark' }, el('span', {}, `high-water ${mark}%`)));
  target.replaceChildren(el('div', { class: 'label' }, el('b', {}, title), el('span', {}, `${bytes(used)} of ${bytes(limit)} (${pctText(pct)})`)), bar,
    ...(pct > 100 ? [el('div', { class: 'over', 'data-over': pct }, `${pct}%: ${meaning}.`)] : []));
}

function figures(target, pairs) {
  target.replaceChildren(...pairs.map(([k, v, id]) => el('div', { class: 'figure', 'data-figure': id || k },
    el('div', { class: 'v' }, v), el('div', { class: 'k' }, k))));
}

function renderOverview(b) {
  usageBar($('usage-memory'), 'Memory', b.memoryUsage, b.memoryLimit, b.memoryPercentUsage, highWaterMark());
  usageBar($('usage-store'), 'Store', b.storeUsage, b.storeLimit, b.storePercentUsage, undefined, OVER_LIMIT.store);
  usageBar($('usage-temp'), 'Temp', b.tempUsage, b.tempLimit, b.tempPercentUsage, undefined, OVER_LIMIT.temp);
  figures($('figures'), [
    [counted(b.connectionCount, 'connection'), num(b.connectionCount), 'connections'],
    [counted(b.blockedProducers, 'blocked producer'), num(b.blockedProducers), 'blocked producers'],
    [counted(b.destinationCount, 'destination'), num(b.destinationCount), 'destinations'],
    [counted(b.consumerCount, 'consumer'), num(b.consumerCount), 'consumers'],
    [counted(b.size, 'message held', 'messages held'), num(b.size), 'messages held'],
    ['in / s (last 5 s)', rate(b.enqueueRate), 'in / s'], ['out / s (last 5 s)', rate(b.dequeueRate), 'out / s'],
  ]);
  renderLabTimeline(b.lab);
  const h = state.history;
  chart('chart-rates', [h.t, h.in, h.out], ['in', 'out'], ['#38c', '#4a8']);
  chart('chart-depth', [h.t, h.ready, h.unacked], ['ready', 'unacknowledged'], ['#38c', '#d80']);
  chart('chart-memory', [h.t, h.memory], ['memory %'], ['#d33'], [0, 100]);
  renderDestinations();
}

// A live lab run (lab run --live --console): what happened so far in the run
// (the broker started or restarted, the evidence the lab noted, what the
// statistics showed), as ticks on a track of the run's seconds, the last few in words.
function renderLabTimeline(lab) {
  const track = $('lab-timeline');
  track.hidden = !lab;
  if (!lab) return;
  const span = Math.max(lab.elapsed, 1);
  track.replaceChildren(
    el('div', { class: 'label' }, el('b', {}, `Lab run: ${lab.run}`), el('span', {}, `${lab.elapsed.toFixed(1)} s`)),
    el('div', { class: 'track' }, ...lab.events.map((e) => el('div', {
      class: 'tick', 'data-event': e.text, style: `left:${(100 * e.t) / span}%`, title: `t=${e.t.toFixed(1)} s: ${e.text}`,
    }))),
    el('ol', { class: 'events' }, ...lab.events.slice(-4).map((e) => el('li', {}, `t=${e.t.toFixed(1)} s  ${e.text}`))));
}

// The broker's bar marks where the first queue cursor stops caching: the lowest
// high-water mark among the queues (their policies'), the default without queues.
function highWaterMark() {
  const marks = state.destinations.filter((d) => d.kind === 'queue' && d.cursorMemoryHighWaterMark)
    .map((d) => d.cursorMemoryHighWaterMark);
  return marks.length ? Math.min(...marks) : DEFAULT_HIGH_WATER_MARK;
}

function chart(id, data, labels, colors, range) {
  const target = $(id);
  if (!data[0].length) return;  // no sample yet: the chart comes with the first
  // A replay draws the run shown, on its own seconds: a new run, a new chart from 0.
  const run = state.view ? state.view.run : null;
  let c = state.charts[id];
  if (c && (!target.contains(c.root) || c.run !== run)) { c.destroy(); c = null; }
  if (!c) {
    const x = run
      ? { time: false, range: () => [0, Math.max(run.duration, 1)] }
      : { time: true, range: (u, min, max) => {  // the last minutes, whatever the samples so far
        const end = Number.isFinite(max) ? max : Date.now() / 1000;  // no sample yet: end now
        return [end - HISTORY_POINTS * POLL_MS / 1000, end];
      } };
    c = new uPlot({
      width: 360, height: 150, legend: { show: true, live: false },
      scales: { x, y: range ? { range: (u, min, max) => [range[0], Math.max(range[1], Number.isFinite(max) ? max : 0)] } : {} },
      series: [{}, ...labels.map((label, i) => ({ label, stroke: colors[i], width: 1.5 }))],
      axes: [run
        ? { space: 50, label: `lab seconds of run ${run.name}`, labelSize: 18, values: (u, ticks) => ticks.map((t) => `${t} s`) }
        // the clock time of each tick (the window is minutes: no date)
        : { space: 70, values: (u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleTimeString()) }, { size: 50 }],
    }, data, target);
    c.run = run;
    state.charts[id] = c;
  } else {
    c.setData(data);
  }
}

const DEST_COLUMNS = [
  ['destinationName', 'Destination', (d) => el('a', { href: `#/destination/${encodeURIComponent(d.destinationName)}` }, d.destinationName), 'text'],
  ['size', 'Size', (d) => num(d.size)],
  ['readyCount', 'Ready', (d) => num(d.readyCount)],
  ['inflightCount', 'Unacked', (d) => num(d.inflightCount)],
  ['enqueueRate', 'In/s (5 s)', (d) => rate(d.enqueueRate)],
  ['dequeueRate', 'Out/s (5 s)', (d) => rate(d.dequeueRate)],
  ['consumerCount', 'Consumers', (d) => num(d.consumerCount)],
  ['cachedCount', 'Cached', (d) => num(d.cachedCount)],
  ['storeOnlyCount', 'Store only', (d) => num(d.storeOnlyCount)],
  ['memoryPercentUsage', 'Memory %', (d) => el('span', { title: pctOf(d) > 100 ? OVER_LIMIT.memory : '' }, pctText(pctOf(d)))],
  ['pendingCount', 'Pending', (d) => (d.kind === 'topic' ? num(d.pendingCount) : '')],
  ['swapped', 'Swapped', (d) => num(swapped(d))],
];
// On disk in the temp store: a topic's swapped pending messages, a queue's spilled non-persistent ones.
const swapped = (d) => (d.kind === 'topic' ? d.swappedCount : d.tempCount) ?? 0;
const sortValue = (d, key) => (key === 'swapped' ? swapped(d) : d[key] ?? -1);

function renderDestinations() {
  const table = $('destinations');
  table.tHead.replaceChildren(el('tr', {}, ...DEST_COLUMNS.map(([key, title, , cls]) => el('th', {
    class: `${cls || ''} ${state.sort.key === key ? (state.sort.dir > 0 ? 'sorted-asc' : 'sorted-desc') : ''}`,
    'data-key': key,
    onclick: () => { state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : (key === 'destinationName' ? 1 : -1) }; render(); },
  }, title)), el('th', { class: 'text' }, can('Purge') || can('Delete') ? 'Actions' : '')));
  const { key, dir } = state.sort;
  const rows = [...state.destinations].sort((a, b) => {
    const x = sortValue(a, key), y = sortValue(b, key);
    return (x < y ? -1 : x > y ? 1 : 0) * dir;
  });
  if (!state.listsLoaded) {
    table.tBodies[0].replaceChildren(el('tr', {}, el('td', { class: 'text muted', colspan: DEST_COLUMNS.length + 1 },
      "Waiting for the broker's answer to ActiveMQ.Statistics.Destination.>…")));
    return;
  }
  table.tBodies[0].replaceChildren(...rows.map((d) => el('tr', { 'data-destination': d.destinationName },
    ...DEST_COLUMNS.map(([k, , cell, cls]) => el('td', { class: cls || '', 'data-key': k }, cell(d))),
    el('td', { class: 'text' }, destinationActions(d)))));
}

function destinationActions(d) {
  const buttons = [];
  const name = d.destinationName;
  if (/^\/(remote-)?temp-/.test(name)) return buttons;  // goes with its connection
  if (d.kind === 'queue' && can('Purge')) buttons.push(el('button', { 'data-action': 'purge', onclick: () => operate('Purge', { target: name }, `purge ${name}`) }, 'Purge'));
  if (can('Delete')) buttons.push(el('button', { class: 'danger', 'data-action': 'delete', onclick: () => operate('Delete', { target: name }, `delete ${name}`) }, 'Delete'));
  if (d.kind === 'queue' && /DLQ/.test(name) && can('Move')) buttons.push(el('button', { 'data-action': 'retry', title: 'move each message back to its original queue', onclick: () => operate('Move', { target: name }, `move the messages of ${name} back to their queues`) }, 'Retry all'));
  return buttons;
}

async function operate(operation, headers, what) {
  if (!window.confirm(`Really ${what}?`)) return;
  try {
    const answer = await admin(operation, headers);
    const figures = Object.entries(answer).filter(([k, v]) => k !== 'operation' && typeof v !== 'object');
    notice(`${what}: done (${figures.map(([k, v]) => `${k} ${v}`).join(', ')})`, 'info');
    poll();
  } catch (e) {
    notice(`${what} failed: ${e.message}`);
  }
}

function renderConnections() {
  const table = $('connections');
  table.tHead.replaceChildren(el('tr', {}, ...['Id', 'Peer', 'User', 'Client id', 'Protocol', 'STOMP', 'Buffered', 'Unacked', 'Subscriptions', ''].map((t, i) => el('th', { class: i === 8 ? 'text' : '' }, t))));
  table.tBodies[0].replaceChildren(...state.connections.map((c) => el('tr', { 'data-connection': c.connection },
    el('td', {}, String(c.connection), c.connection === state.ownConnection ? el('span', { class: 'muted' }, ' (this page)') : ''), el('td', {}, c.remoteAddress), el('td', {}, c.user ?? '–'),
    el('td', {}, c.clientId ?? '–'), el('td', {}, c.protocol === 'websocket' ? 'WebSocket' : 'TCP'), el('td', {}, c.version),
    el('td', {}, bytes(c.outboundQueuedBytes)), el('td', {}, num(c.unacknowledged)),
    el('td', { class: 'text' }, (c.subscriptionList || []).map((s) => `${s.destinationName} (${s.ack}, ${s.outstanding}/${s.prefetchSize})`).join(', ') || '–'),
    el('td', {}, can('Close') ? el('button', { class: 'danger', 'data-action': 'close', onclick: () => operate('Close', { connection: String(c.connection) }, `close connection ${c.connection}`) }, 'Close') : ''))));
}

function renderDestination(name) {
  const d = state.destinations.find((x) => x.destinationName === name);
  $('dest-title').textContent = name;
  if (!d) {
    const where = state.player ? `not in run ${state.view.run.name} at this moment` : 'this destination does not exist (any more)';
    figures($('dest-figures'), [['gone', where]]);
    return;
  }
  figures($('dest-figures'), [
    ['kind', d.kind], ['size', num(d.size)], ['ready', num(d.readyCount)], ['unacked', num(d.inflightCount)],
    ['in / s', rate(d.enqueueRate)], ['out / s', rate(d.dequeueRate)], ['consumers', num(d.consumerCount)],
    ['memory', `${bytes(d.memoryUsage)} (${pctOf(d)}%)`], ['cached', num(d.cachedCount)], ['store only', num(d.storeOnlyCount)],
    ['enqueued', num(d.enqueueCount)], ['dequeued', num(d.dequeueCount)], ['expired', num(d.expiredCount)],
  ]);
  usageBar($('dest-memory'), 'Memory of this destination', d.memoryUsage, d.memoryLimit, pctOf(d),
    d.kind === 'queue' ? d.cursorMemoryHighWaterMark : undefined);
  $('dest-actions').replaceChildren(...destinationActions(d),
    ...(can('Browse') && d.kind === 'queue' ? [el('button', { 'data-action': 'browse', onclick: () => browse(name) }, 'Show first messages')] : []));
  const dh = state.destHistory.get(name) || { t: [], memory: [], size: [] };
  chart('chart-dest-memory', [dh.t, dh.memory], ['memory %'], ['#d33'], [0, 100]);
  chart('chart-dest-depth', [dh.t, dh.size], ['size'], ['#38c']);
  const table = $('consumers');
  table.tHead.replaceChildren(el('tr', {}, ...['Connection', 'Subscription', 'User', 'Client id', 'Ack', 'Prefetch', 'Outstanding', 'Pending', 'Swapped', 'Slow', 'Selector'].map((t) => el('th', {}, t))));
  table.tBodies[0].replaceChildren(...(d.consumers || []).map((c) => el('tr', {},
    el('td', {}, String(c.connection)), el('td', {}, c.subscription), el('td', {}, c.user ?? '–'), el('td', {}, c.clientId ?? '–'),
    el('td', {}, c.ack), el('td', {}, num(c.prefetchSize)), el('td', {}, num(c.outstanding)), el('td', {}, num(c.pending)), el('td', {}, num(c.swapped ?? 0)),
    el('td', { class: c.slowConsumer ? 'slow' : '' }, c.slowConsumer ? 'slow' : 'no'), el('td', {}, c.selector ?? ''))));
  if (state.messages === null && can('Browse') && d.kind === 'queue') { state.messages = []; browse(name); }
  if (state.player) $('messages').replaceChildren(el('p', { class: 'muted' }, 'A recording keeps the figures, not the messages.'));
  else if (!state.whoamiDone) $('messages').replaceChildren(el('p', { class: 'muted' }, 'Loading…'));  // may this user browse?
  else if (!can('Browse')) $('messages').replaceChildren(el('p', { class: 'muted' }, 'Browsing messages needs the admin right.'));
}

async function browse(name) {
  try {
    const answer = await admin('Browse', { target: name, count: '10', 'body-limit': '2048' });
    state.messages = answer.messages || [];
    $('messages').replaceChildren(...(state.messages.length ? state.messages.map((m) => el('div', { class: 'message' },
      el('div', { class: 'headers' }, `${m.messageId} · ${bytes(m.bodySize)}${m.persistent ? ' · persistent' : ''} · priority ${m.priority}${m.redelivered ? ' · redelivered' : ''}`),
      el('pre', {}, m.bodyEncoding === 'base64' ? `(base64) ${m.body}` : m.body + (m.bodyTruncated ? ' …' : ''))))
      : [el('p', { class: 'muted' }, 'No message waits on this queue.')]));
  } catch (e) {
    $('messages').replaceChildren(el('p', { class: 'muted' }, `browse failed: ${e.message}`));
  }
}

// ---------------------------------------------------------------- pages
function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  let r = { page: 'overview' };
  if (hash === 'connections') r = { page: 'connections' };
  else if (hash.startsWith('destination/')) r = { page: 'destination', name: decodeURIComponent(hash.slice('destination/'.length)) };
  if (r.page !== state.route.page || r.name !== state.route.name) state.messages = null;
  state.route = r;
  // Before the broker's first statistics the page says what it waits for; a refused CONNECT asks for a login.
  const shown = state.needLogin ? 'login' : !state.broker ? 'loading' : r.page;
  for (const page of ['loading', 'login', 'overview', 'connections', 'destination']) $(`page-${page}`).hidden = page !== shown;
  if (shown === 'loading') $('loading-what').textContent = loadingText();
  if (shown === 'login') {
    $('login-reason').textContent = state.credentials.login ? `The broker refused: ${state.loginRefused}` : 'This broker needs a user name and password.';
  }
}
window.addEventListener('hashchange', render);

// What the page waits for before it can show the broker, and for how long.
function loadingText() {
  if (!state.connected) return `Connecting to the broker (STOMP over WebSocket at ${location.host}/stomp)…`;
  if (state.loadingReplay) return `Loading the lab's ${state.loadingReplay} recorded ${counted(state.loadingReplay, 'run')}…`;
  const waited = state.asked.get('Broker');
  if (waited === undefined) return 'Connected; asking the broker for its statistics…';
  const seconds = Math.floor((Date.now() - waited) / 1000);
  return "Connected; waiting for the broker's answer to ActiveMQ.Statistics.Broker"
    + (seconds >= 1 ? ` (asked ${seconds} s ago: a busy broker answers late)…` : '…');
}

$('login').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  state.credentials = { login: form.get('login'), passcode: form.get('passcode') };
  connect();
});
// A file written by lab run --export carries its recording: it plays without a broker.
const recorded = document.getElementById('minibroker-recording');
if (recorded) {
  setStatus(true, 'a copy for offline use: no broker needed');
  startPlayer(JSON.parse(recorded.textContent));
} else {
  connect();
}
