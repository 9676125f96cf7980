"""ActiveMQ and minibroker over STOMP: their statistics destinations, as samples.

Theory of operation:

- connect; CONNECTED's ``server`` header says which broker it is
  (``ActiveMQ/5.17.2``, ``minibroker/0.1.0``); anything else is refused;
- minibroker answers ``ActiveMQ.Statistics.*`` with JSON (``stat``'s
  ``fetch_statistics``: broker, destinations, connections, subscriptions);
- ActiveMQ's statisticsBrokerPlugin answers a map message to the request's
  ``reply-to``, which STOMP carries with ``transformation: jms-map-json``
  (ActiveMQ 5.17 answers in the XML form, ``jms-map-xml``: both are read). It
  tells no count of replies, so the requests for queues and topics are
  followed by one for the broker, which comes last: its answer ends the sample;
- no answer to the first request: the plugin is not configured, and the
  error says what to add to ``activemq.xml``.
"""

from __future__ import annotations

import contextlib
import json
import xml.etree.ElementTree as ET
from typing import Any

from ...commands.stat import fetch_statistics
from ...stomp import CannotConnect, ConnectionLost, StompClient, StompClientError, StompError
from ..model import DoctorError
from .sample import ACTIVEMQ, MINIBROKER, Connection, Consumer, Destination, Sample, broker_internal
from .target import Target

__all__ = ["StompReader", "parse_map", "activemq_sample", "minibroker_sample", "NO_PLUGIN"]

NO_PLUGIN = (
    "ActiveMQ at {where} did not answer ActiveMQ.Statistics.Broker in {timeout:g} s: its statistics plugin is "
    "not configured (or the broker is too busy: a longer --timeout). "
    "Add it inside <broker> in activemq.xml and restart: <plugins><statisticsBrokerPlugin/></plugins> "
    "(and, for STOMP's jms-map-json transformation, xstream and jettison on its classpath)"
)
_REPLY = "/temp-queue/minibroker-doctor"


class StompReader:
    """One STOMP connection to a broker, sampled again and again."""

    def __init__(self, target: Target, timeout: float = 5.0) -> None:
        self.target = target
        self.timeout = timeout
        self.kind = ""
        self.version = ""
        self._client: StompClient | None = None
        self._reply: Any = None
        self._answered = False  # a sample has been answered: a later silence is a broker that stopped

    async def open(self) -> None:
        t = self.target
        try:
            client = await StompClient.connect(
                t.host, t.port, login=t.user, passcode=t.password, connect_timeout=self.timeout
            )
        except StompError as exc:
            raise DoctorError(f"{t.shown} refused the login: {exc}") from None
        except (CannotConnect, ConnectionLost, OSError) as exc:
            raise DoctorError(f"cannot read a STOMP broker at {t.shown}: {exc}") from None
        server = client.server or ""
        self._client = client
        if server.startswith("ActiveMQ/"):
            self.kind = ACTIVEMQ
        elif server.startswith("minibroker/"):
            self.kind = MINIBROKER
        else:
            await self.close()
            raise DoctorError(
                f"{t.shown} speaks STOMP but is neither ActiveMQ nor minibroker (server {server or 'not named'})"
            )
        self.version = server.split("/", 1)[1]
        if self.kind == MINIBROKER:
            return  # ``fetch_statistics`` subscribes its own reply queue
        try:
            self._reply = await client.subscribe(_REPLY, receipt=False)
        except StompClientError as exc:
            raise DoctorError(f"{t.shown} refused the statistics' reply queue: {exc}") from None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(StompClientError, OSError):
                await client.disconnect(timeout=2)

    async def sample(self, t: float) -> Sample:
        """One sample, taken at ``t``; DoctorError if the broker stops answering."""
        assert self._client is not None
        try:
            if self.kind == MINIBROKER:
                stats = await fetch_statistics(
                    self._client, ">", connections=True, subscriptions=True, timeout=self.timeout
                )
                sample = minibroker_sample(t, stats)
            else:
                sample = activemq_sample(t, *await self._activemq())
        except TimeoutError:
            if self.kind == ACTIVEMQ and not self._answered:
                raise DoctorError(NO_PLUGIN.format(where=self.target.shown, timeout=self.timeout)) from None
            raise DoctorError(
                f"{self.target.shown} stopped answering its statistics (none in {self.timeout:g} s)"
            ) from None
        except StompClientError as exc:
            raise DoctorError(f"lost {self.target.shown} while sampling: {exc}") from None
        self._answered = True
        return sample

    async def _activemq(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        assert self._client is not None
        headers = {"reply-to": _REPLY, "transformation": "jms-map-json"}
        for kind in ("queue", "topic"):
            await self._client.send(f"/{kind}/ActiveMQ.Statistics.Destination.>", b"", headers=headers)
        await self._client.send("/queue/ActiveMQ.Statistics.Broker", b"", headers=headers)
        destinations: list[dict[str, Any]] = []
        while True:
            msg = await self._reply.get(timeout=self.timeout)
            values = parse_map(msg.body, msg.headers.get("transformation", ""))
            if "destinationName" not in values:
                return values, destinations
            destinations.append(values)


def parse_map(body: bytes, transformation: str) -> dict[str, Any]:
    """A JMS map message as ActiveMQ's STOMP transformations write it (XML or JSON) -> a dict."""
    text = body.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        entries = json.loads(text).get("map", {}).get("entry", [])
        out: dict[str, Any] = {}
        for entry in entries if isinstance(entries, list) else [entries]:
            (key, *rest), value = _json_entry(entry)
            out[key] = value
        return out
    root = ET.fromstring(text)
    result: dict[str, Any] = {}
    for entry in root.findall("entry"):
        children = list(entry)
        if len(children) == 2:
            result[children[0].text or ""] = _xml_value(children[1])
    return result


def _json_entry(entry: dict[str, Any]) -> tuple[list[str], Any]:
    """Jettison's entry: ``{"string": ["name", "value"]}`` or ``{"string": "name", "long": 5}``."""
    names = entry.get("string")
    if isinstance(names, list):
        return [str(names[0])], names[1] if len(names) > 1 else ""
    value = next((v for k, v in entry.items() if k != "string"), "")
    return [str(names)], value


def _xml_value(node: ET.Element) -> Any:
    text = node.text or ""
    if node.tag in ("long", "int", "short", "byte"):
        return int(text)
    if node.tag in ("double", "float"):
        return float(text)
    if node.tag == "boolean":
        return text == "true"
    return text


def _int(values: dict[str, Any], key: str) -> int | None:
    v = values.get(key)
    try:
        return int(v) if v is not None and v != "" else None
    except (TypeError, ValueError):
        return None


def activemq_sample(t: float, broker: dict[str, Any], destinations: list[dict[str, Any]]) -> Sample:
    """ActiveMQ's plugin's broker and destination maps as a sample."""
    dests = []
    for d in destinations:
        name = str(d.get("destinationName", ""))
        kind = "topic" if name.startswith("topic://") else "queue"
        short = name.split("://", 1)[-1]
        if broker_internal(short):  # advisories and the statistics destinations themselves
            continue
        dests.append(
            Destination(
                name=f"/{kind}/{short}",
                kind=kind,
                size=_int(d, "size") or 0,
                enqueued=_int(d, "enqueueCount") or 0,
                dequeued=_int(d, "dequeueCount") or 0,
                dispatched=_int(d, "dispatchCount"),
                consumers=_int(d, "consumerCount") or 0,
                inflight=_int(d, "inflightCount") or 0,
                producers=_int(d, "producerCount"),
                memory_usage=_int(d, "memoryUsage"),
                memory_pct=_int(d, "memoryPercentUsage"),
                expired=_int(d, "expiredCount"),
            )
        )
    return Sample(
        t=t,
        broker=ACTIVEMQ,
        name=str(broker.get("brokerName", "")),
        memory_pct=_int(broker, "memoryPercentUsage"),
        memory_usage=_int(broker, "memoryUsage"),
        memory_limit=_int(broker, "memoryLimit"),
        temp_pct=_int(broker, "tempPercentUsage"),
        store_pct=_int(broker, "storePercentUsage"),
        destinations=tuple(sorted(dests, key=lambda d: d.name)),
        notes=(
            "ActiveMQ's statistics plugin tells no per-consumer figures (prefetch, unacknowledged), no "
            "redeliveries and no connections: prefetch_full_slow_acks, redelivery_loop and "
            "blocked_holding_unacked were not evaluated",
        ),
    )


def minibroker_sample(t: float, stats: dict[str, Any]) -> Sample:
    """``stat``'s statistics of minibroker as a sample."""
    b = stats["broker"]
    acked = {(s["connection"], s["subscription"]): s.get("ackedCounter") for s in stats.get("subscriptions", [])}
    dests, consumers = [], []
    for d in stats["destinations"]:
        dests.append(
            Destination(
                name=d["destinationName"],
                kind=d["kind"],
                size=d["size"],
                enqueued=d["enqueueCount"],
                dequeued=d["dequeueCount"],
                dispatched=d.get("dispatchCount"),
                consumers=d["consumerCount"],
                inflight=d.get("inflightCount", 0),
                memory_usage=d.get("memoryUsage"),
                memory_pct=d.get("memoryPercentUsage"),
                cursor_hwm=d.get("cursorMemoryHighWaterMark"),
                store_only=d.get("storeOnlyCount"),
                pending=d.get("pendingCount"),
                redelivered=d.get("redeliveredCount"),
                expired=d.get("expiredCount"),
                journal_full=d.get("journalState") == "full",
                journal_files=d.get("journalFiles"),
            )
        )
        for c in d.get("consumers", []):
            consumers.append(
                Consumer(
                    name=f"{c['connection']}/{c['subscription']}",
                    destination=d["destinationName"],
                    connection=str(c["connection"]),
                    prefetch=c["prefetchSize"],
                    outstanding=c["outstanding"],
                    acked=acked.get((c["connection"], c["subscription"])),
                    pending=c.get("pending"),
                    slow=c.get("slowConsumer"),
                )
            )
    connections = tuple(
        Connection(
            name=f"{c['connection']} ({c.get('remoteAddress', '')})",
            user=c.get("user", ""),
            blocked=c.get("blockedSends", 0) > 0,
            publishes=c.get("messagesIn", 0) > 0,
            consumes=c.get("subscriptions", 0) > 0,
            stalled=bool(c.get("transportPaused")),
            unacked=c.get("unacknowledged"),
        )
        for c in stats.get("connections", [])
    )
    return Sample(
        t=t,
        broker=MINIBROKER,
        name=b.get("brokerName", ""),
        memory_pct=b["memoryPercentUsage"],
        memory_usage=b["memoryUsage"],
        memory_limit=b["memoryLimit"],
        temp_pct=b["tempPercentUsage"],
        store_pct=b["storePercentUsage"],
        store_full=b.get("storeState") == "full",
        store_rings=b.get("storeRings"),
        store_files=b.get("storeFiles"),
        store_files_with_live=b.get("storeFilesWithLive"),
        blocked_producers=b.get("blockedProducers"),
        destinations=tuple(dests),
        consumers=tuple(consumers),
        connections=connections,
    )
