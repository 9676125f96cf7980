#!/usr/bin/env python3
# vendored from ../shared/bench/stomp_relay.py, unchanged except for this line
"""stomp_relay.py - the "loopback ceiling": a trivial single-process asyncio STOMP frame relay.

No broker logic: no store, no acks, no prefetch, no transactions, no persistence.  It does only
what any asyncio STOMP broker must do at minimum per message:
  * incrementally split the byte stream into frames (content-length aware),
  * answer CONNECT / SUBSCRIBE / UNSUBSCRIBE / DISCONNECT and any `receipt:` header,
  * turn SEND into MESSAGE (prepend subscription / message-id / ack headers, keep the rest of the
    raw frame bytes untouched) and write it to the subscriber(s): round-robin for /queue/,
    fan-out for /topic/,
  * coalesce writes per outgoing connection per read, and pause producers when a subscriber's
    transport buffer is over its high-water mark.
Messages sent to a queue with no subscriber are held in a deque and flushed on SUBSCRIBE.

    python stomp_relay.py --port 61615 [--pidfile /tmp/relay.pid] [--max-seconds 3600]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import socket
import sys


class Relay:
    def __init__(self):
        self.subs: dict[bytes, list] = collections.defaultdict(list)  # dest -> [(conn, subid)]
        self.rr: dict[bytes, int] = collections.defaultdict(int)
        self.backlog: dict[bytes, collections.deque] = collections.defaultdict(collections.deque)
        self.conns: set = set()
        self.mid = 0
        self.paused_subscribers = 0

    def pause_all(self):
        for c in self.conns:
            c.pause_reading()

    def resume_all(self):
        for c in self.conns:
            c.resume_reading()


def hdr(block: bytes, key: bytes):
    i = block.find(key)
    if i < 0:
        return None
    i += len(key)
    j = block.find(b"\n", i)
    return block[i : j if j >= 0 else len(block)].rstrip(b"\r")


class RelayConn(asyncio.Protocol):
    def __init__(self, relay: Relay):
        self.r = relay
        self.buf = bytearray()
        self.t = None
        self.out: list[bytes] = []
        self.my_subs: list[tuple[bytes, bytes]] = []
        self.reading_paused = False
        self.write_paused = False

    def connection_made(self, t):
        self.t = t
        t.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t.set_write_buffer_limits(high=512 * 1024)
        self.r.conns.add(self)
        if self.r.paused_subscribers:
            self.pause_reading()

    def connection_lost(self, exc):
        self.r.conns.discard(self)
        for dest, sid in self.my_subs:
            lst = self.r.subs.get(dest)
            if lst:
                self.r.subs[dest] = [x for x in lst if x[0] is not self]
        if self.write_paused:
            self.resume_writing()

    # flow control: a slow subscriber pauses reading on every connection
    def pause_writing(self):
        self.write_paused = True
        self.r.paused_subscribers += 1
        if self.r.paused_subscribers == 1:
            self.r.pause_all()

    def resume_writing(self):
        self.write_paused = False
        self.r.paused_subscribers -= 1
        if self.r.paused_subscribers == 0:
            self.r.resume_all()

    def pause_reading(self):
        if not self.reading_paused and self.t and not self.t.is_closing():
            self.reading_paused = True
            self.t.pause_reading()

    def resume_reading(self):
        if self.reading_paused and self.t and not self.t.is_closing():
            self.reading_paused = False
            self.t.resume_reading()

    def data_received(self, data):
        buf = self.buf
        buf += data
        n = len(buf)
        pos = 0
        touched: set = set()
        while True:
            while pos < n and (buf[pos] == 10 or buf[pos] == 13):
                pos += 1
            if pos >= n:
                break
            hend = buf.find(b"\n\n", pos)
            if hend < 0:
                break
            block = bytes(buf[pos:hend])
            ci = block.find(b"\ncontent-length:")
            if ci >= 0:
                ce = block.find(b"\n", ci + 1)
                clen = int(block[ci + 16 : ce if ce >= 0 else len(block)])
                end = hend + 2 + clen + 1
                if n < end:
                    break
            else:
                z = buf.find(b"\x00", hend + 2)
                if z < 0:
                    break
                end = z + 1
            ce = block.find(b"\n")
            cmd = block[:ce] if ce >= 0 else block
            if cmd == b"SEND":
                dest = hdr(block, b"\ndestination:")
                self.r.mid += 1
                rest = bytes(buf[pos + 4 : end])  # "\n<headers>\n\n<body>\0" after the command
                self.route(dest, rest, touched)
            elif cmd in (b"ACK", b"NACK"):
                pass
            elif cmd in (b"CONNECT", b"STOMP"):
                self.out.append(b"CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:stomp_relay\n\n\x00")
            elif cmd == b"SUBSCRIBE":
                dest = hdr(block, b"\ndestination:")
                sid = hdr(block, b"\nid:") or b"0"
                self.my_subs.append((dest, sid))
                self.r.subs[dest].append((self, sid))
                bl = self.r.backlog.get(dest)
                if bl:
                    while bl:
                        self.out.append(b"MESSAGE\nsubscription:" + sid + bl.popleft())
            elif cmd == b"UNSUBSCRIBE":
                sid = hdr(block, b"\nid:")
                for dest, s in list(self.my_subs):
                    if s == sid:
                        self.my_subs.remove((dest, s))
                        self.r.subs[dest] = [x for x in self.r.subs[dest] if not (x[0] is self and x[1] == sid)]
            elif cmd == b"DISCONNECT":
                pass
            else:
                self.out.append(b"ERROR\nmessage:unsupported command\n\n\x00")
            rid = hdr(block, b"\nreceipt:")
            if rid is not None:
                self.out.append(b"RECEIPT\nreceipt-id:" + rid + b"\n\n\x00")
            pos = end
        if pos:
            del buf[:pos]
        for c in touched:
            if c.out:
                c.t.write(b"".join(c.out))
                c.out.clear()
        if self.out:
            self.t.write(b"".join(self.out))
            self.out.clear()

    def route(self, dest: bytes, rest: bytes, touched: set):
        subs = self.r.subs.get(dest)
        mid = b"\nmessage-id:%d\nack:%d" % (self.r.mid, self.r.mid)
        if not subs:
            if dest.startswith(b"/queue/"):
                self.r.backlog[dest].append(mid + rest)
            return
        if dest.startswith(b"/topic/"):
            for c, sid in subs:
                c.out.append(b"MESSAGE\nsubscription:" + sid + mid + rest)
                touched.add(c)
        else:
            i = self.r.rr[dest] % len(subs)
            self.r.rr[dest] = i + 1
            c, sid = subs[i]
            c.out.append(b"MESSAGE\nsubscription:" + sid + mid + rest)
            touched.add(c)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=61615)
    ap.add_argument("--pidfile")
    ap.add_argument("--max-seconds", type=float, default=3600, help="exit by itself after this long")
    a = ap.parse_args()
    relay = Relay()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RelayConn(relay), a.host, a.port, reuse_address=True)
    if a.pidfile:
        with open(a.pidfile, "w") as f:
            f.write(str(os.getpid()))
    stop = asyncio.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    print(f"stomp_relay listening on {a.host}:{a.port}", file=sys.stderr, flush=True)
    try:
        await asyncio.wait_for(stop.wait(), a.max_seconds)
    except asyncio.TimeoutError:
        pass
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
