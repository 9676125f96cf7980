#!/usr/bin/env python3
# vendored from ../shared/bench/stomp_bench.py, unchanged except for this line
"""stomp_bench.py - standalone STOMP 1.2 throughput / latency harness.

Raw asyncio sockets + a minimal hand-written STOMP 1.2 codec (no client library), so
the measuring tool stays cheap and can be pointed at any STOMP broker unchanged.

Every message carries three harness headers:
    bench-run:<token>   random per run, so stale messages from earlier runs are ignored
    bench-seq:<int>     globally unique id: producer_index * per_producer + i
    bench-ts:<int>      time.monotonic_ns() at send (same process => comparable)

At the end exactly one JSON line is printed on stdout (progress/errors go to stderr).
Exit code: 0 = ok (no loss, no dups, finished in time), 1 = finished but not ok,
2 = error, 3 = hard timeout watchdog fired.

Examples:
    stomp_bench.py --port 61613 --dest /queue/a --messages 100000 --size 256
    stomp_bench.py --dest /queue/b --persistent true --receipt-every 100
    stomp_bench.py --dest /topic/c --producers 1 --consumers 4 --messages 50000
    stomp_bench.py --dest /queue/d --ack client-individual --prefetch 1 --messages 20000
    stomp_bench.py --dest /queue/e --rate 500 --messages 5000          # latency run
"""
from __future__ import annotations

import argparse
from bisect import bisect_right
import asyncio
import json
import os
import resource
import secrets
import signal
import socket
import sys
import time
from array import array

NUL = 0
VERSION = 1


def eprint(*a):
    print(*a, file=sys.stderr, flush=True)


def str2bool(v: str) -> bool:
    v = v.lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")


def hdr(block: bytes, key: bytes):
    """Value of the first header `key` (given as b'\\nname:') in a raw header block.

    Raw (still escaped) bytes are returned; we only ever echo them back or parse ints.
    """
    i = block.find(key)
    if i < 0:
        return None
    i += len(key)
    j = block.find(b"\n", i)
    if j < 0:
        j = len(block)
    v = block[i:j]
    if v.endswith(b"\r"):
        v = v[:-1]
    return v


# --------------------------------------------------------------------------- protocol
class StompConn(asyncio.Protocol):
    """Minimal STOMP 1.2 client connection. Frames are parsed incrementally from a bytearray."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop):
        self.name = name
        self.loop = loop
        self.buf = bytearray()
        self.transport = None
        self.connected = loop.create_future()
        self.closed = loop.create_future()
        self.receipts: dict[bytes, asyncio.Future] = {}
        self.on_message = None  # callable(header_block: bytes, body: bytes)
        self.after_batch = None  # callable() after each data_received (flush acks)
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.errors: list[str] = []
        self.frames_in = 0
        self.lost: Exception | None = None

    # -- asyncio callbacks
    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=256 * 1024)

    def connection_lost(self, exc):
        self.lost = ConnectionError(f"{self.name}: connection lost ({exc})")
        if not self.closed.done():
            self.closed.set_result(exc)
        err = ConnectionError(f"{self.name}: connection lost ({exc})")
        if not self.connected.done():
            self.connected.set_exception(err)
        for f in self.receipts.values():
            if not f.done():
                f.set_exception(err)
        self._can_write.set()

    def pause_writing(self):
        self._can_write.clear()

    def resume_writing(self):
        self._can_write.set()

    async def writable(self):
        if not self._can_write.is_set():
            await self._can_write.wait()

    def data_received(self, data):
        buf = self.buf
        buf += data
        n = len(buf)
        pos = 0
        on_message = self.on_message
        while True:
            # skip heart-beat EOLs between frames
            while pos < n and (buf[pos] == 10 or buf[pos] == 13):
                pos += 1
            if pos >= n:
                break
            eol = buf.find(b"\n", pos)
            if eol < 0:
                break
            crlf = eol > pos and buf[eol - 1] == 13
            if crlf:
                hend = buf.find(b"\r\n\r\n", pos)
                skip = 4
            else:
                hend = buf.find(b"\n\n", pos)
                skip = 2
            if hend < 0:
                break
            block = bytes(buf[pos:hend])
            bstart = hend + skip
            ci = block.find(b"\ncontent-length:")
            if ci >= 0:
                ce = block.find(b"\n", ci + 1)
                clen = int(block[ci + 16 : ce if ce >= 0 else len(block)].strip())
                if n < bstart + clen + 1:
                    break
                body = bytes(buf[bstart : bstart + clen])
                pos = bstart + clen + 1  # skip NUL
            else:
                z = buf.find(b"\x00", bstart)
                if z < 0:
                    break
                body = bytes(buf[bstart:z])
                pos = z + 1
            self.frames_in += 1
            ce = block.find(b"\n")
            cmd = block[:ce] if ce >= 0 else block
            if crlf:
                cmd = cmd.rstrip(b"\r")
            if cmd == b"MESSAGE":
                if on_message is not None:
                    on_message(block, body)
            elif cmd == b"RECEIPT":
                rid = hdr(block, b"\nreceipt-id:")
                f = self.receipts.pop(rid, None)
                if f is not None and not f.done():
                    f.set_result(time.monotonic_ns())
            elif cmd == b"CONNECTED":
                if not self.connected.done():
                    self.connected.set_result(block)
            elif cmd == b"ERROR":
                msg = (hdr(block, b"\nmessage:") or b"").decode("utf-8", "replace")
                text = f"{self.name}: ERROR frame: {msg} | {body[:300].decode('utf-8', 'replace')}"
                self.errors.append(text)
                eprint(text)
                if not self.connected.done():
                    self.connected.set_exception(ConnectionError(text))
                for f in self.receipts.values():
                    if not f.done():
                        f.set_exception(ConnectionError(text))
                self.receipts.clear()
            else:
                self.errors.append(f"{self.name}: unexpected frame {cmd!r}")
        if pos:
            del buf[:pos]
        if self.after_batch is not None:
            self.after_batch()

    # -- helpers
    def send_raw(self, data: bytes):
        if self.lost is not None:
            raise self.lost
        self.transport.write(data)

    def expect_receipt(self, rid: bytes) -> asyncio.Future:
        if self.lost is not None:
            raise self.lost
        f = self.loop.create_future()
        self.receipts[rid] = f
        return f


async def open_conn(args, name: str, loop) -> StompConn:
    _, proto = await loop.create_connection(lambda: StompConn(name, loop), args.host, args.port)
    lines = [b"CONNECT", b"accept-version:" + args.accept_version.encode(), b"host:" + args.vhost.encode(),
             b"heart-beat:0,0"]
    if args.login is not None:
        lines.append(b"login:" + args.login.encode())
    if args.passcode is not None:
        lines.append(b"passcode:" + args.passcode.encode())
    proto.send_raw(b"\n".join(lines) + b"\n\n\x00")
    await asyncio.wait_for(proto.connected, args.connect_timeout)
    return proto


async def close_conn(proto: StompConn, timeout=2.0):
    if proto is None or proto.transport is None or proto.transport.is_closing():
        return
    try:
        f = proto.expect_receipt(b"bye")
        proto.send_raw(b"DISCONNECT\nreceipt:bye\n\n\x00")
        await asyncio.wait_for(f, timeout)
    except Exception:
        pass
    proto.transport.close()


# --------------------------------------------------------------------------- stats
def percentiles(vals: array) -> dict:
    if not vals:
        return {"n": 0}
    s = sorted(vals)
    n = len(s)

    def p(q):
        return s[min(n - 1, max(0, int(round(q * (n - 1)))))] / 1e6

    return {
        "n": n,
        "p50": round(p(0.50), 3),
        "p90": round(p(0.90), 3),
        "p99": round(p(0.99), 3),
        "p999": round(p(0.999), 3),
        "max": round(s[-1] / 1e6, 3),
        "mean": round(sum(s) / n / 1e6, 3),
    }


def proc_cpu_ticks(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return int(parts[11]) + int(parts[12])  # utime + stime (fields 14, 15)
    except Exception:
        return None


def system_cpu_jiffies():
    """(busy, total) jiffies summed over all CPUs from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        total = sum(vals[:8])
        return total - idle, total
    except Exception:
        return None


def proc_mem(pid: int):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = round(int(v.split()[0]) / 1024, 1)
    except Exception:
        pass
    return out


# --------------------------------------------------------------------------- bench
class Bench:
    def __init__(self, args, loop):
        self.a = args
        self.loop = loop
        self.token = secrets.token_hex(4).encode()
        self.is_topic = args.dest.startswith("/topic/")
        P, N = args.producers, args.messages
        self.per_prod = [N // P + (1 if i < N % P else 0) for i in range(P)] if P else []
        self.id_base = []
        base = 0
        for c in self.per_prod:
            self.id_base.append(base)
            base += c
        self.n_ids = N
        self.expected_per_consumer = N if self.is_topic else None
        self.expected_total = N * args.consumers if self.is_topic else N
        # queue: one shared count array; topic: one per consumer
        nc = args.consumers if self.is_topic else 1
        self.counts = [bytearray(N) for _ in range(nc)]
        self.unique = [0] * nc
        self.recv_per_consumer = [0] * args.consumers
        self.received = 0
        self.dups = 0
        self.foreign = 0
        self.out_of_order = 0
        self.lat = array("q")
        self.sent = 0
        self.receipts_ok = 0
        self.t_start = None
        self.t_send_end = None
        self.t_last_expected = None
        self.t_last_any = None
        self.done = asyncio.Event()
        self.errors: list[str] = []
        self.conns: list[StompConn] = []

    # -- consumer side
    def make_handler(self, ci: int, proto: StompConn, sub_id: bytes):
        a = self.a
        slot = ci if self.is_topic else 0
        counts = self.counts[slot]
        token = self.token
        need_ack = a.ack != "auto"
        acks: list[bytes] = []
        n_ids = self.n_ids
        id_base = self.id_base
        last_seq = [-1] * max(1, a.producers)
        lat_append = self.lat.append
        mono = time.monotonic_ns
        topic = self.is_topic
        expected_pc = self.expected_per_consumer
        expected_total = self.expected_total

        def on_message(block: bytes, body: bytes):
            now = mono()
            self.t_last_any = now
            if need_ack:
                aid = hdr(block, b"\nack:")
                mid = hdr(block, b"\nmessage-id:") or b""
                if aid is None:
                    aid = mid
                acks.append(b"ACK\nid:" + aid + b"\nmessage-id:" + mid + b"\nsubscription:" + sub_id + b"\n\n\x00")
            if hdr(block, b"\nbench-run:") != token:
                self.foreign += 1
                return
            seq = int(hdr(block, b"\nbench-seq:"))
            lat_append(now - int(hdr(block, b"\nbench-ts:")))
            self.received += 1
            self.recv_per_consumer[ci] += 1
            if 0 <= seq < n_ids:
                c = counts[seq]
                if c:
                    self.dups += 1
                    if c < 255:
                        counts[seq] = c + 1
                    return
                counts[seq] = 1
                # ordering check per (consumer, producer)
                p = bisect_right(id_base, seq) - 1
                if seq < last_seq[p]:
                    self.out_of_order += 1
                last_seq[p] = seq
                self.unique[slot] += 1
                if topic:
                    if self.unique[slot] == expected_pc and all(u >= expected_pc for u in self.unique):
                        self.t_last_expected = now
                        self.done.set()
                elif self.unique[0] == expected_total:
                    self.t_last_expected = now
                    self.done.set()
            else:
                self.foreign += 1

        def after_batch():
            if acks:
                if proto.lost is None:
                    proto.send_raw(b"".join(acks))
                acks.clear()

        return on_message, after_batch

    async def start_consumer(self, ci: int):
        a = self.a
        proto = await open_conn(a, f"consumer{ci}", self.loop)
        self.conns.append(proto)
        sub_id = f"bench-{ci}".encode()
        proto.on_message, proto.after_batch = self.make_handler(ci, proto, sub_id)
        lines = [b"SUBSCRIBE", b"id:" + sub_id, b"destination:" + a.dest.encode(), b"ack:" + a.ack.encode()]
        if a.prefetch is not None:
            lines.append(b"activemq.prefetchSize:%d" % a.prefetch)
            lines.append(b"prefetch-count:%d" % a.prefetch)
            for h in a.prefetch_header:
                lines.append(h.encode() + b":%d" % a.prefetch)
        for h in a.sub_header:
            lines.append(h.encode())
        rid = b"sub-%d" % ci
        f = proto.expect_receipt(rid)
        lines.append(b"receipt:" + rid)
        proto.send_raw(b"\n".join(lines) + b"\n\n\x00")
        await asyncio.wait_for(f, a.connect_timeout)
        return proto

    # -- producer side
    async def producer(self, pi: int, proto: StompConn):
        a = self.a
        n = self.per_prod[pi]
        base = self.id_base[pi]
        body = os.urandom(a.size // 2 + 1).hex().encode()[: a.size] if a.size else b""
        pre = b"SEND\ndestination:" + a.dest.encode() + b"\ncontent-length:%d\n" % len(body)
        if a.persistent:
            pre += b"persistent:true\n"
        for h in a.send_header:
            pre += h.encode() + b"\n"
        pre += b"bench-run:" + self.token + b"\nbench-seq:"
        tail = b"\n\n" + body + b"\x00"
        mono = time.monotonic_ns
        K = a.receipt_every
        window: list[asyncio.Future] = []
        batch: list[bytes] = []
        flush_every = 1 if a.rate else a.batch
        rate_iv = 1.0 / a.rate if a.rate else 0.0
        next_t = self.loop.time()
        for i in range(n):
            if rate_iv:
                now = self.loop.time()
                if next_t > now:
                    await asyncio.sleep(next_t - now)
                next_t += rate_iv
            seq = base + i
            want_receipt = (K and (i + 1) % K == 0) or i == n - 1
            if want_receipt:
                rid = b"p%d-%d" % (pi, i)
                fut = proto.expect_receipt(rid)
                batch.append(pre + b"%d\nbench-ts:%d\nreceipt:%s" % (seq, mono(), rid) + tail)
            else:
                batch.append(pre + b"%d\nbench-ts:%d" % (seq, mono()) + tail)
            self.sent += 1
            if want_receipt or len(batch) >= flush_every:
                proto.send_raw(b"".join(batch))
                batch.clear()
                if want_receipt:
                    window.append(fut)
                    while len(window) >= a.receipt_window or (i == n - 1 and window):
                        await window.pop(0)
                        self.receipts_ok += 1
                else:
                    await proto.writable()
                    if not rate_iv:
                        await asyncio.sleep(0)  # let consumers run
        return mono()

    async def run(self):
        a = self.a
        # consumers first (subscription confirmed by receipt), then producers
        for ci in range(a.consumers):
            await self.start_consumer(ci)
        prods = []
        for pi in range(a.producers):
            proto = await open_conn(a, f"producer{pi}", self.loop)
            self.conns.append(proto)
            prods.append(proto)
        self.t_start = time.monotonic_ns()
        self.cpu0 = proc_cpu_ticks(a.broker_pid) if a.broker_pid else None
        self.sys0 = system_cpu_jiffies()
        self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
        ptasks = [asyncio.ensure_future(self.producer(i, p)) for i, p in enumerate(prods)]
        if ptasks:
            ends = await asyncio.gather(*ptasks)
            self.t_send_end = max(ends)
        else:
            self.t_send_end = time.monotonic_ns()
        if a.consumers:
            # wait for all expected deliveries, but give up when nothing arrives for idle_timeout
            while not self.done.is_set():
                last = self.t_last_any or self.t_send_end
                idle = (time.monotonic_ns() - max(last, self.t_send_end)) / 1e9
                if idle > a.idle_timeout:
                    self.status = "stalled"
                    break
                try:
                    await asyncio.wait_for(self.done.wait(), 0.25)
                except asyncio.TimeoutError:
                    pass
        self.t_measured_end = self.t_last_expected or time.monotonic_ns()
        self.cpu1 = proc_cpu_ticks(a.broker_pid) if a.broker_pid else None
        self.sys1 = system_cpu_jiffies()
        self.ru1 = resource.getrusage(resource.RUSAGE_SELF)
        if a.linger > 0:
            await asyncio.sleep(a.linger)  # catch late duplicates

    def report(self, status: str) -> dict:
        a = self.a
        lost = 0
        for cnt in self.counts:
            lost += cnt.count(0)
        t0 = self.t_start
        send_secs = (self.t_send_end - t0) / 1e9 if (t0 and self.t_send_end) else None
        e2e_end = self.t_last_expected or self.t_last_any
        e2e_secs = (e2e_end - t0) / 1e9 if (t0 and e2e_end) else None
        unique = sum(self.unique)
        ok = status == "ok" and lost == 0 and self.dups == 0 and not self.errors
        r = {
            "tool": "stomp_bench",
            "v": VERSION,
            "label": a.label,
            "status": status,
            "ok": ok,
            "host": a.host,
            "port": a.port,
            "dest": a.dest,
            "messages": a.messages,
            "size": a.size,
            "producers": a.producers,
            "consumers": a.consumers,
            "persistent": a.persistent,
            "ack": a.ack,
            "prefetch": a.prefetch,
            "receipt_every": a.receipt_every,
            "rate_limit": a.rate,
            "sent": self.sent,
            "receipts": self.receipts_ok,
            "expected": self.expected_total if a.consumers else 0,
            "received": self.received,
            "unique": unique,
            "lost": lost if a.consumers else None,
            "duplicates": self.dups,
            "foreign": self.foreign,
            "out_of_order": self.out_of_order,
            "recv_per_consumer": list(self.recv_per_consumer),
            "send_secs": round(send_secs, 4) if send_secs else None,
            "send_rate": round(self.sent / send_secs, 1) if send_secs else None,
            "e2e_secs": round(e2e_secs, 4) if e2e_secs else None,
            "e2e_rate": round(self.received / e2e_secs, 1) if e2e_secs else None,
            "latency_ms": percentiles(self.lat),
            "errors": self.errors[:10],
        }
        if self.t_start and getattr(self, "ru1", None) is not None:
            # CPU over [first send, last expected delivery]; /proc counters tick at 100 Hz,
            # so intervals under 0.5 s are not reported.  100% == one core.
            wall = (self.t_measured_end - self.t_start) / 1e9
            if wall >= 0.5:
                hz = os.sysconf("SC_CLK_TCK")
                cpu = (self.ru1.ru_utime - self.ru0.ru_utime) + (self.ru1.ru_stime - self.ru0.ru_stime)
                r["client_cpu_pct"] = round(100 * cpu / wall, 1)
                if a.broker_pid and self.cpu0 is not None and self.cpu1 is not None:
                    r["broker_cpu_pct"] = round(100 * (self.cpu1 - self.cpu0) / hz / wall, 1)
                s0, s1 = getattr(self, "sys0", None), getattr(self, "sys1", None)
                if s0 and s1 and s1[1] > s0[1]:
                    ncpu = os.cpu_count() or 1
                    r["system_cpu_pct"] = round(100 * ncpu * (s1[0] - s0[0]) / (s1[1] - s0[1]), 1)
                    if "broker_cpu_pct" in r:
                        r["other_cpu_pct"] = round(r["system_cpu_pct"] - r["broker_cpu_pct"] - r["client_cpu_pct"], 1)
            r["loadavg"] = open("/proc/loadavg").read().split()[0]
        if a.broker_pid:
            r["broker_mem_mb"] = proc_mem(a.broker_pid)
        return r


async def amain(args) -> dict:
    loop = asyncio.get_running_loop()
    b = Bench(args, loop)
    b.status = "ok"
    try:
        await asyncio.wait_for(b.run(), args.timeout)
    except asyncio.TimeoutError:
        b.status = "timeout"
    except Exception as e:  # connection refused, ERROR frames, ...
        b.status = "error"
        b.errors.append(f"{type(e).__name__}: {e}")
    for c in b.conns:
        b.errors.extend(c.errors)
    if b.status == "ok" and b.a.consumers and not b.done.is_set():
        b.status = "incomplete"
    if getattr(b, "ru1", None) is None:
        b.t_measured_end = time.monotonic_ns()
        b.ru1 = resource.getrusage(resource.RUSAGE_SELF)
        b.cpu1 = proc_cpu_ticks(args.broker_pid) if args.broker_pid else None
        b.sys1 = system_cpu_jiffies()
        if not hasattr(b, "ru0"):
            b.ru1 = None
    rep = b.report(b.status)
    await asyncio.gather(*(close_conn(c) for c in b.conns), return_exceptions=True)
    return rep


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=61613)
    ap.add_argument("--vhost", default="localhost", help="CONNECT host header (CoilMQ requires its FQDN)")
    ap.add_argument("--accept-version", default="1.2",
                    help="CONNECT accept-version (ACK frames always carry id, message-id and subscription)")
    ap.add_argument("--login")
    ap.add_argument("--passcode")
    ap.add_argument("--dest", default="/queue/bench", help="/queue/x or /topic/x")
    ap.add_argument("--messages", type=int, default=10000, help="total messages sent (split across producers)")
    ap.add_argument("--size", type=int, default=256, help="body bytes")
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--persistent", type=str2bool, default=False)
    ap.add_argument("--ack", choices=["auto", "client", "client-individual"], default="auto")
    ap.add_argument("--prefetch", type=int, default=None,
                    help="sent as activemq.prefetchSize and prefetch-count SUBSCRIBE headers")
    ap.add_argument("--prefetch-header", action="append", default=[],
                    help="additional header name to carry the prefetch value")
    ap.add_argument("--receipt-every", type=int, default=0,
                    help="request a RECEIPT every K sends and wait for it (bounds in-flight); 0=only the last send")
    ap.add_argument("--receipt-window", type=int, default=1,
                    help="receipts that may be outstanding before the producer blocks; 1 = stop-and-wait on "
                         "every receipt (in-flight <= K)")
    ap.add_argument("--rate", type=float, default=0.0, help="per-producer send rate limit msg/s (0 = flat out)")
    ap.add_argument("--batch", type=int, default=32, help="frames coalesced per socket write when not rate limited")
    ap.add_argument("--send-header", action="append", default=[], help="extra 'name:value' SEND header")
    ap.add_argument("--sub-header", action="append", default=[], help="extra 'name:value' SUBSCRIBE header")
    ap.add_argument("--timeout", type=float, default=120.0, help="hard limit for the whole run (s)")
    ap.add_argument("--idle-timeout", type=float, default=15.0,
                    help="after sends finish, give up when nothing arrives for this long (s)")
    ap.add_argument("--connect-timeout", type=float, default=10.0)
    ap.add_argument("--linger", type=float, default=0.3, help="keep consuming after completion to catch duplicates (s)")
    ap.add_argument("--broker-pid", type=int, default=None, help="sample this pid's CPU%% and RSS from /proc")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", help="also append the JSON line to this file")
    a = ap.parse_args(argv)
    if a.producers < 0 or a.consumers < 0 or a.messages < 0:
        ap.error("negative counts")
    if a.producers == 0:
        a.messages = 0
    return a


def main(argv=None):
    args = parse_args(argv)

    # watchdog: whatever happens, this process exits
    def hard_timeout(signum, frame):
        line = json.dumps({"tool": "stomp_bench", "label": args.label, "status": "hard-timeout", "ok": False})
        print(line, flush=True)
        os._exit(3)

    signal.signal(signal.SIGALRM, hard_timeout)
    signal.alarm(int(args.timeout + args.linger + 20))
    try:
        rep = asyncio.run(amain(args))
    except Exception as e:
        rep = {"tool": "stomp_bench", "label": args.label, "status": "error", "ok": False, "errors": [repr(e)]}
    signal.alarm(0)
    line = json.dumps(rep)
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    if rep.get("status") == "error":
        return 2
    return 0 if rep.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
