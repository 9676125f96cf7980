// stomp.js (@stomp/stompjs over @stomp/tcp-wrapper) against a broker on 127.0.0.1:PORT.
// Run by tests/test_stompjs.py: `node interop.mjs PORT`; prints one JSON object of what it saw.
import { Client } from '@stomp/stompjs';
import { TCPWrapper } from '@stomp/tcp-wrapper';

const port = Number(process.argv[2]);
const seen = { connected: null, queue: [], topic: [], receipts: [], errors: [] };
const done = (code) => { process.stdout.write(JSON.stringify(seen) + '\n'); process.exit(code); };
setTimeout(() => { seen.timeout = true; done(1); }, 15000);

function waitFor(predicate) {
  return new Promise((resolve) => {
    const tick = () => (predicate() ? resolve() : setTimeout(tick, 5));
    tick();
  });
}

function client(heartbeat) {
  return new Client({
    webSocketFactory: () => new TCPWrapper('127.0.0.1', port),
    connectHeaders: { host: 'localhost' },
    heartbeatIncoming: heartbeat,
    heartbeatOutgoing: heartbeat,
    reconnectDelay: 0,
    debug: () => {},
  });
}

const c = client(500);
c.onStompError = (frame) => seen.errors.push({ message: frame.headers.message, body: frame.body });
c.onConnect = async (frame) => {
  seen.connected = { version: frame.headers.version, server: frame.headers.server,
                     heartBeat: frame.headers['heart-beat'], session: frame.headers.session };
  // A queue at client-individual with prefetch 1: ACK two, NACK the third, which comes back redelivered.
  let nacked = false;
  c.subscribe('/queue/js.q', (m) => {
    seen.queue.push({ n: m.headers.n, odd: m.headers.odd, slash: m.headers.slash, body: m.body, redelivered: m.headers.redelivered || null,
                      binary: Array.from(m.binaryBody), subscription: m.headers.subscription,
                      hasAck: 'ack' in m.headers });
    if (m.headers.n === '2' && !nacked) { nacked = true; m.nack(); } else { m.ack(); }
  }, { id: 'q1', ack: 'client-individual', 'activemq.prefetchSize': '1' });
  for (let n = 0; n < 3; n++) {
    // Header values with a colon, a newline and a backslash, escaped on the wire both ways. (Not a
    // backslash before c, n or r: stomp.js 7.5 unescapes with one replace after another, so it reads
    // the wire's `\\c` (an escaped backslash, then c) as a backslash and a colon.)
    c.publish({ destination: '/queue/js.q', body: `m${n}`, headers: { n: String(n), odd: 'a:b\nc', slash: 'x\\y' } });
  }
  c.publish({ destination: '/queue/js.q', binaryBody: new Uint8Array([0, 1, 0, 255]), headers: { n: 'bin' } });
  await waitFor(() => seen.queue.length >= 5);

  // A topic, and a receipt.
  c.subscribe('/topic/js.t', (m) => seen.topic.push(m.body), { id: 't1' });
  c.watchForReceipt('r-1', (f) => seen.receipts.push(f.headers['receipt-id']));
  c.publish({ destination: '/topic/js.t', body: 'to all', headers: { receipt: 'r-1' } });
  await waitFor(() => seen.topic.length >= 1 && seen.receipts.length >= 1);

  // Heart-beats: stay idle across several intervals; the broker must keep the connection.
  await new Promise((r) => setTimeout(r, 1600));
  seen.stillConnected = c.connected;

  // A bad frame (SEND with no destination): an ERROR with a message, then the broker closes.
  c.publish({ destination: '', body: 'nowhere' });
  await waitFor(() => seen.errors.length >= 1);
  done(0);
};
c.activate();
