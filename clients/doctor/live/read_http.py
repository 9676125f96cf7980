"""RabbitMQ's management API (and ActiveMQ's Jolokia) over HTTP, as samples.

Theory of operation:

- ``open`` asks ``/api/overview``: a JSON answer naming ``rabbitmq_version`` is
  RabbitMQ; otherwise ``/api/jolokia/version`` answering Jolokia's ``agent``
  is ActiveMQ's web console; 401 is a refused login, anything else is no broker;
- a RabbitMQ sample is ``/api/nodes`` (memory used and its limit, the memory and
  disk alarms), ``/api/queues`` (messages, unacknowledged, consumers, the
  publish / deliver / ack / redeliver counters), ``/api/connections`` (their
  ``blocked`` state), ``/api/channels`` (what each connection publishes, its
  unacknowledged deliveries) and ``/api/consumers`` (prefetch, the channel);
- a Jolokia sample reads the broker's, the destinations' and the persistence
  adapter's MBeans with one wildcard read each: KahaDB's adapter names its
  journal files (``Data``: their numbers), a destination its sends held by
  flow control at that moment (``BlockedSends``).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from ..model import DoctorError
from .sample import ACTIVEMQ, RABBITMQ, Connection, Consumer, Destination, Sample, broker_internal
from .target import Target

__all__ = ["HttpReader", "rabbitmq_sample", "jolokia_sample"]

_JOLOKIA_BROKER = "org.apache.activemq:type=Broker,brokerName=*"
_JOLOKIA_DESTS = "org.apache.activemq:type=Broker,brokerName=*,destinationType=*,destinationName=*"
_JOLOKIA_STORE = "org.apache.activemq:type=Broker,brokerName=*,service=PersistenceAdapter,instanceName=*"
#: The attributes a sample reads (all of them would cost the broker every subscriber list, each sample).
_BROKER_ATTRIBUTES = "BrokerName,MemoryPercentUsage,MemoryLimit,TempPercentUsage,StorePercentUsage"
_DEST_ATTRIBUTES = (
    "Name,QueueSize,EnqueueCount,DequeueCount,DispatchCount,ConsumerCount,InFlightCount,ProducerCount,"
    "MemoryUsageByteCount,MemoryPercentUsage,ExpiredCount,BlockedSends"
)


class _HttpStatus(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


class HttpReader:
    """One HTTP endpoint (RabbitMQ's management API or Jolokia), sampled again and again."""

    def __init__(self, target: Target, timeout: float = 5.0) -> None:
        self.target = target
        self.timeout = timeout
        self.kind = ""
        self.version = ""
        self._answered = False  # a sample has been answered: a later failure is a broker that stopped

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.target.base + path, headers={"Accept": "application/json"})
        if self.target.user is not None:
            token = base64.b64encode(f"{self.target.user}:{self.target.password or ''}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise _HttpStatus(exc.code) from None
        except http.client.HTTPException:  # no status line: another protocol's port
            raise DoctorError(
                f"{self.target.shown} does not speak HTTP (a STOMP port? read it as stomp://HOST:PORT)"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DoctorError(f"cannot read {self.target.shown}: {reason}") from None
        try:
            return json.loads(body)
        except ValueError:
            raise DoctorError(
                f"{self.target.shown}{path} answered something that is not JSON: not a broker's API"
            ) from None

    def _refused(self, status: int, what: str) -> DoctorError:
        if status == 401:
            who = f"user {self.target.user!r}" if self.target.user else "no user (give one with --user)"
            return DoctorError(f"{self.target.shown} refused the login ({who}): HTTP 401 from {what}")
        if status == 404:
            return DoctorError(
                f"{self.target.shown} has no {what} (HTTP 404): not RabbitMQ's management API nor Jolokia"
            )
        return DoctorError(f"{self.target.shown} answered HTTP {status} to {what}")

    async def open(self) -> None:
        """Tell RabbitMQ from Jolokia (blocking HTTP, off the event loop)."""
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        try:
            overview = self._get("/api/overview")
        except _HttpStatus as exc:
            if exc.status != 404:
                raise self._refused(exc.status, "/api/overview") from None
            overview = None
        if isinstance(overview, dict) and "rabbitmq_version" in overview:
            self.kind, self.version = RABBITMQ, str(overview["rabbitmq_version"])
            return
        try:
            version = self._get("/api/jolokia/version")
        except _HttpStatus as exc:
            raise self._refused(exc.status, "/api/overview nor /api/jolokia") from None
        value = version.get("value") if isinstance(version, dict) else None
        if not isinstance(value, dict) or "agent" not in value:
            raise DoctorError(f"{self.target.shown} is neither RabbitMQ's management API nor ActiveMQ's Jolokia")
        self.kind, self.version = ACTIVEMQ, str(value.get("info", {}).get("version", ""))

    async def close(self) -> None:
        return None

    def _read(self, path: str) -> Any:
        try:
            return self._get(path)
        except _HttpStatus as exc:
            raise self._refused(exc.status, path) from None

    async def sample(self, t: float) -> Sample:
        """One sample, taken at ``t`` (blocking HTTP, off the event loop); DoctorError if the
        broker stops answering (said so once it has answered a sample)."""
        try:
            sample = await asyncio.to_thread(self._sample, t)
        except DoctorError as exc:
            if not self._answered:
                raise
            raise DoctorError(f"{self.target.shown} stopped answering while sampling: {exc}") from None
        self._answered = True
        return sample

    def _sample(self, t: float) -> Sample:
        if self.kind == RABBITMQ:
            return rabbitmq_sample(
                t,
                nodes=self._read("/api/nodes"),
                queues=self._read("/api/queues"),
                connections=self._read("/api/connections"),
                channels=self._read("/api/channels"),
                consumers=self._read("/api/consumers"),
            )
        broker = self._read(f"/api/jolokia/read/{quote(_JOLOKIA_BROKER, safe=':=,*')}/{_BROKER_ATTRIBUTES}")
        dests = self._read(f"/api/jolokia/read/{quote(_JOLOKIA_DESTS, safe=':=,*')}/{_DEST_ATTRIBUTES}")
        try:  # a broker without a persistence adapter's MBean (not persistent) has no journal to count
            store = self._get(f"/api/jolokia/read/{quote(_JOLOKIA_STORE, safe=':=,*')}/Data")
        except _HttpStatus:
            store = {}
        return jolokia_sample(t, broker, dests, store)


def _stat(item: dict[str, Any], key: str) -> int:
    value = item.get("message_stats", {}).get(key, 0)
    return int(value) if isinstance(value, (int, float)) else 0


def rabbitmq_sample(
    t: float,
    *,
    nodes: list[dict[str, Any]],
    queues: list[dict[str, Any]],
    connections: list[dict[str, Any]],
    channels: list[dict[str, Any]],
    consumers: list[dict[str, Any]],
) -> Sample:
    """The management API's answers as a sample (one node's memory: the fullest)."""
    used = [(n.get("mem_used", 0), n.get("mem_limit", 0)) for n in nodes if n.get("mem_limit")]
    pct = max((u * 100 // lim for u, lim in used), default=None)
    dests = tuple(
        Destination(
            name=f"{q.get('vhost', '/')}:{q['name']}" if q.get("vhost", "/") != "/" else q["name"],
            kind="queue",
            size=int(q.get("messages", 0) or 0),
            enqueued=_stat(q, "publish"),
            dequeued=_stat(q, "ack") + _stat(q, "deliver_no_ack"),
            dispatched=_stat(q, "deliver_get"),
            consumers=int(q.get("consumers", 0) or 0),
            inflight=int(q.get("messages_unacknowledged", 0) or 0),
            memory_usage=q.get("memory"),
            redelivered=_stat(q, "redeliver"),
        )
        for q in queues
    )
    unacked = {ch["name"]: int(ch.get("messages_unacknowledged", 0) or 0) for ch in channels}
    held: dict[str, int] = {}
    for ch in channels:
        owner = ch.get("connection_details", {}).get("name", "")
        held[owner] = held.get(owner, 0) + unacked[ch["name"]]
    acked = {ch["name"]: _stat(ch, "ack") for ch in channels}
    publishing = {ch.get("connection_details", {}).get("name") for ch in channels if _stat(ch, "publish") > 0}
    consuming = {c.get("channel_details", {}).get("connection_name") for c in consumers}
    consumer_rows = tuple(
        Consumer(
            name=f"{c.get('channel_details', {}).get('name', '')} {c.get('consumer_tag', '')}",
            destination=c.get("queue", {}).get("name", ""),
            connection=c.get("channel_details", {}).get("connection_name", ""),
            prefetch=int(c.get("prefetch_count", 0) or 0),
            outstanding=unacked.get(c.get("channel_details", {}).get("name", ""), 0),
            acked=acked.get(c.get("channel_details", {}).get("name", "")),
        )
        for c in consumers
        if c.get("ack_required", True)
    )
    conns = tuple(
        Connection(
            name=c["name"],
            user=c.get("user", ""),
            blocked=c.get("state") in ("blocked", "blocking"),
            # RabbitMQ blocks a connection only once it publishes ("blocking" until then)
            publishes=c["name"] in publishing or c.get("state") == "blocked",
            consumes=c["name"] in consuming,
            unacked=held.get(c["name"], 0),
        )
        for c in connections
    )
    return Sample(
        t=t,
        broker=RABBITMQ,
        name=",".join(n.get("name", "") for n in nodes),
        memory_pct=pct,
        memory_usage=sum(u for u, _ in used) if used else None,
        memory_limit=sum(lim for _, lim in used) if used else None,
        memory_alarm=any(n.get("mem_alarm") for n in nodes),
        disk_alarm=any(n.get("disk_free_alarm") for n in nodes),
        blocked_producers=sum(1 for c in conns if c.blocked and c.publishes),
        destinations=dests,
        consumers=consumer_rows,
        connections=conns,
    )


def journal_files(store: dict[str, Any]) -> int | None:
    """The journal files KahaDB's persistence adapter names (its ``Data``: ``[1, 2, 3]``, the
    files' numbers); None for another store, or none read."""
    values = store.get("value")
    if not isinstance(values, dict):
        return None
    counts = []
    for attributes in values.values():
        data = str((attributes or {}).get("Data", "")).strip()
        if not (data.startswith("[") and data.endswith("]")):
            return None
        numbers = [n.strip() for n in data[1:-1].split(",") if n.strip()]
        if not all(n.isdigit() for n in numbers):
            return None
        counts.append(len(numbers))
    return sum(counts) if counts else None


def jolokia_sample(
    t: float, broker: dict[str, Any], dests: dict[str, Any], store: dict[str, Any] | None = None
) -> Sample:
    """Jolokia's wildcard reads of the broker's, the destinations' and the persistence adapter's
    MBeans as a sample."""
    b: dict[str, Any] = next(iter((broker.get("value") or {}).values()), {})
    rows = []
    blocked: int | None = None  # sends held by flow control now (None: MBeans that do not count them)
    for mbean, a in (dests.get("value") or {}).items():
        props = dict(p.split("=", 1) for p in mbean.split(":", 1)[-1].split(",") if "=" in p)
        kind = props.get("destinationType", "Queue").lower()
        name = a.get("Name") or props.get("destinationName", "")
        if kind not in ("queue", "topic") or broker_internal(str(name)):
            continue
        if a.get("BlockedSends") is not None:
            blocked = (blocked or 0) + int(a["BlockedSends"])
        rows.append(
            Destination(
                name=f"/{kind}/{name}",
                kind=kind,
                size=int(a.get("QueueSize", 0)),
                enqueued=int(a.get("EnqueueCount", 0)),
                dequeued=int(a.get("DequeueCount", 0)),
                dispatched=a.get("DispatchCount"),
                consumers=int(a.get("ConsumerCount", 0)),
                inflight=int(a.get("InFlightCount", 0)),
                producers=a.get("ProducerCount"),
                memory_usage=a.get("MemoryUsageByteCount"),
                memory_pct=a.get("MemoryPercentUsage"),
                expired=a.get("ExpiredCount"),
            )
        )
    return Sample(
        t=t,
        broker=ACTIVEMQ,
        name=str(b.get("BrokerName", "")),
        memory_pct=b.get("MemoryPercentUsage"),
        memory_limit=b.get("MemoryLimit"),
        temp_pct=b.get("TempPercentUsage"),
        store_pct=b.get("StorePercentUsage"),
        store_files=journal_files(store or {}),
        blocked_producers=blocked,
        destinations=tuple(sorted(rows, key=lambda d: d.name)),
        notes=(
            "read over Jolokia, the broker's and the destinations' MBeans only: no per-consumer figures "
            "(prefetch, unacknowledged), no redeliveries and no connections: prefetch_full_slow_acks, "
            "redelivery_loop and blocked_holding_unacked were not evaluated",
        ),
    )
