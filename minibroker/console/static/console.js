// minibroker's web console. Everything it shows and does goes over STOMP, through the
// broker's own WebSocket endpoint (/stomp on this port), as any client's would:
// statistics are requests to /queue/ActiveMQ.Statistics.* and operations to
// /queue/ActiveMQ.Admin.* (docs/admin.md), answered in JSON on this page's
// temporary queue. It polls every second and keeps the last minutes for the charts.
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
const can = (op) => state.operations.includes(op);
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
  client.onConnect = () => {
    state.connected = true;
    state.needLogin = false;
    setStatus(true, `connected${state.credentials.login ? ` as ${state.credentials.login}` : ''}`);
    client.subscribe(REPLY_TO, onReply, { id: 'console' });
    render();  // the loading page says what it waits for now
    whoami();
    poll();
  };
  client.onStompError = (frame) => {
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
const statistics = (what) => request(`/queue/ActiveMQ.Statistics.${what}`, {}, true);

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
  if (!state.connected || state.polling) return;
  state.polling = true;
  try {
    const [[broker], destinations, connections] = await Promise.all(
      [statistics('Broker'), statistics('Destination.>'), statistics('Connection')]);
    state.broker = broker;
    state.destinations = destinations;
    state.connections = connections;
    remember(broker, destinations);
    render();
  } catch (e) {
    // a closed connection: the reconnect starts polling again
  } finally {
    state.polling = false;
  }
}
setInterval(poll, POLL_MS);

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
  renderBanners(b.diagnosis || []);
  if (state.route.page === 'overview') renderOverview(b);
  else if (state.route.page === 'connections') renderConnections();
  else renderDestination(state.route.name);
}

function renderBanners(findings) {
  $('banners').replaceChildren(...findings.map((f) => el('div', { class: 'banner', 'data-pathology': f.pathology },
    el('b', {}, f.summary), el('div', { class: 'cure' }, `Cure: ${f.cure}`))));
}

function usageBar(target, title, used, limit, pct, mark) {
  const fill = el('div', { class: `fill ${pct >= 100 ? 'full' : pct >= (mark || 101) ? 'high' : ''}`, style: `width:${Math.min(pct, 100)}%` });
  const bar = el('div', { class: 'bar', role: 'meter', 'aria-valuenow': pct, 'aria-valuemin': 0, 'aria-valuemax': 100 }, fill);
  if (mark) bar.append(el('div', { class: 'mark', style: `left:${mark}%`, title: 'the cursor high-water mark' }, el('span', {}, `high-water ${mark}%`)));
  target.replaceChildren(el('div', { class: 'label' }, el('b', {}, title), el('span', {}, `${bytes(used)} of ${bytes(limit)} (${pct}%)`)), bar);
}

function figures(target, pairs) {
  target.replaceChildren(...pairs.map(([k, v, id]) => el('div', { class: 'figure', 'data-figure': id || k },
    el('div', { class: 'v' }, v), el('div', { class: 'k' }, k))));
}

function renderOverview(b) {
  usageBar($('usage-memory'), 'Memory', b.memoryUsage, b.memoryLimit, b.memoryPercentUsage, highWaterMark());
  usageBar($('usage-store'), 'Store', b.storeUsage, b.storeLimit, b.storePercentUsage);
  usageBar($('usage-temp'), 'Temp', b.tempUsage, b.tempLimit, b.tempPercentUsage);
  figures($('figures'), [
    ['connections', num(b.connectionCount)], ['blocked producers', num(b.blockedProducers)],
    ['destinations', num(b.destinationCount)], ['consumers', num(b.consumerCount)],
    ['messages held', num(b.size)], ['in / s', rate(b.enqueueRate)], ['out / s', rate(b.dequeueRate)],
  ]);
  renderTimeline(b.replay);
  renderLabTimeline(b.lab);
  const h = state.history;
  chart('chart-rates', [h.t, h.in, h.out], ['in', 'out'], ['#38c', '#4a8']);
  chart('chart-depth', [h.t, h.ready, h.unacked], ['ready', 'unacknowledged'], ['#38c', '#d80']);
  chart('chart-memory', [h.t, h.memory], ['memory %'], ['#d33'], [0, 100]);
  renderDestinations();
}

// A lab replayed from its traces (lab run --console on the virtual clock): its
// phases as a track (each run, and inside it the windows a producer was
// blocked), with a cursor where the replay is.
function renderTimeline(replay) {
  const track = $('timeline');
  track.hidden = !replay;
  if (!replay) return;
  const span = replay.end || 1;
  const at = (t) => `${(100 * t) / span}%`;
  const width = (p) => `${(100 * Math.max(p.end - p.start, 0)) / span}%`;
  const phases = replay.phases.map((p) => el('div', {
    class: `phase ${p.kind} ${p.verdict || ''} ${p.kind === 'run' && p.name === replay.run ? 'current' : ''}`,
    'data-phase': p.name, style: `left:${at(p.start)};width:${width(p)}`,
    title: `${p.name}${p.verdict ? ` (${p.verdict})` : ''}: ${p.start.toFixed(1)}–${p.end.toFixed(1)} s`,
  }, p.kind === 'run' ? p.name : ''));
  track.replaceChildren(
    el('div', { class: 'label' }, el('b', {}, `Replay of the lab: ${replay.run}`),
      el('span', { id: 'replay-position' }, `${replay.position.toFixed(1)} of ${replay.end.toFixed(1)} lab seconds, ${replay.speed}× speed`)),
    el('div', { class: 'track' }, ...phases, el('div', { class: 'cursor', style: `left:${at(replay.position)}` })));
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
  let c = state.charts[id];
  if (!c || !target.contains(c.root)) {
    c = new uPlot({
      width: 360, height: 150, legend: { show: true, live: false },
      // the last minutes, whatever the samples so far
      scales: { x: { time: true, range: (u, min, max) => {
        const end = Number.isFinite(max) ? max : Date.now() / 1000;  // no sample yet: end now
        return [end - HISTORY_POINTS * POLL_MS / 1000, end];
      } },
                y: range ? { range: () => range } : {} },
      series: [{}, ...labels.map((label, i) => ({ label, stroke: colors[i], width: 1.5 }))],
      // the clock time of each tick (the window is minutes: no date)
      axes: [{ space: 70, values: (u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleTimeString()) }, { size: 50 }],
    }, data, target);
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
  ['enqueueRate', 'In/s', (d) => rate(d.enqueueRate)],
  ['dequeueRate', 'Out/s', (d) => rate(d.dequeueRate)],
  ['consumerCount', 'Consumers', (d) => num(d.consumerCount)],
  ['cachedCount', 'Cached', (d) => num(d.cachedCount)],
  ['storeOnlyCount', 'Store only', (d) => num(d.storeOnlyCount)],
  ['memoryPercentUsage', 'Memory %', (d) => `${pctOf(d)}%`],
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
  if (!d) { figures($('dest-figures'), [['gone', 'this destination does not exist (any more)']]); return; }
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
  if (!state.whoamiDone) $('messages').replaceChildren(el('p', { class: 'muted' }, 'Loading…'));  // may this user browse?
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
  if (shown === 'loading') $('loading-what').textContent = state.connected ? "Loading the broker's statistics…" : 'Connecting to the broker…';
  if (shown === 'login') {
    $('login-reason').textContent = state.credentials.login ? `The broker refused: ${state.loginRefused}` : 'This broker needs a user name and password.';
  }
}
window.addEventListener('hashchange', render);

$('login').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  state.credentials = { login: form.get('login'), passcode: form.get('passcode') };
  connect();
});
connect();
