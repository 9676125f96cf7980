"""STOMP listeners: the stalled-socket source (a large prefetch on a socket nothing watches, and
the reconnect refused because the broker still holds the client id).

Checked per STOMP listener: ours has one (``[transport]``); an ActiveMQ file
may have several STOMP connectors, or none.
"""

from __future__ import annotations

from .model import INFO, WARNING, Change, Finding, Listener, PolicyRef, Setup

__all__ = [
    "prefetch_without_write_timeout",
    "no_heart_beats",
    "link_stealing_off",
    "no_stomp_listener",
    "LARGE_PREFETCH",
]

#: A default prefetch at or above this (ActiveMQ's queue default) counts as large.
LARGE_PREFETCH = 1000
WRITE_TIMEOUT = 30000
HEART_BEAT = (10000, 10000)


def _large_prefetch(setup: Setup) -> list[tuple[PolicyRef, str]]:
    return [
        (r, key)
        for kind, key in (("queue", "queue_prefetch"), ("topic", "topic_prefetch"))
        for r in setup.policies(kind)
        if getattr(r.entry, key) >= LARGE_PREFETCH
    ]


def _unwatched(listener: Listener) -> bool:
    """Nothing notices a dead or stuck peer: no write timeout and no default heart-beat."""
    return listener.transport.so_write_timeout == 0 and listener.transport.default_heart_beat == (0, 0)


def no_stomp_listener(setup: Setup) -> list[Finding]:
    if setup.listeners:
        return []
    return [
        Finding(
            "no-stomp-listener",
            INFO,
            "stalled-socket",
            "no STOMP transport connector: the STOMP checks were skipped",
            (),
            "The checks of the stalled-socket story (source: stalled-socket) look at the STOMP connectors' URI options (transport.soWriteTimeout, "
            "transport.defaultHeartBeat) and this file has no STOMP connector.",
        )
    ]


def prefetch_without_write_timeout(setup: Setup) -> list[Finding]:
    large = _large_prefetch(setup)
    out = []
    for listener in setup.listeners:
        if not large or listener.transport.so_write_timeout:
            continue
        biggest = max(getattr(r.entry, key) for r, key in large)
        out.append(
            Finding(
                "prefetch-without-write-timeout",
                WARNING,
                "stalled-socket",
                f"STOMP subscriptions get a prefetch of up to {biggest} and nothing times out a blocked write",
                (
                    *(setup.show_policy(r, key) for r, key in large[:3]),
                    setup.show_listener(listener, "so_write_timeout"),
                ),
                "The broker writes every message the prefetch allows to the socket; a slow consumer (or a slow store "
                "answering its ACKs) fills the TCP queues on both sides and the connection freezes: the client's write "
                "fails while the broker sees a healthy connection (source: stalled-socket). A write timeout closes a connection whose "
                "writes have not moved; a small prefetch keeps the queues from filling.",
                "set a write timeout on the STOMP listener, and subscribe slow consumers with the header "
                "activemq.prefetchSize:1 (the source's fix)",
                (Change("transport.so_write_timeout", WRITE_TIMEOUT, listener=listener.name),),
            )
        )
    return out


def no_heart_beats(setup: Setup) -> list[Finding]:
    out = []
    for listener in setup.listeners:
        if listener.transport.default_heart_beat != (0, 0):
            continue
        unwatched = _unwatched(listener)
        out.append(
            Finding(
                "no-heart-beats",
                WARNING if unwatched else INFO,
                "stalled-socket",
                "clients that send no heart-beat header get no heart-beats: a dead peer is never noticed",
                (
                    setup.show_listener(listener, "default_heart_beat"),
                    setup.show_listener(listener, "so_write_timeout"),
                ),
                "The default heart-beat applies when CONNECT has no heart-beat header; at 0,0 STOMP has no keepalive at "
                "all, so a half-open connection (the peer gone, or its socket stuck) stays connected on the broker, "
                "holding its unacknowledged messages and its client id (source: stalled-socket)."
                + ("" if unwatched else " The write timeout still closes a connection whose writes are stuck."),
                "give connections a default heart-beat",
                (Change("transport.default_heart_beat", HEART_BEAT, listener=listener.name),),
            )
        )
    return out


def link_stealing_off(setup: Setup) -> list[Finding]:
    out = []
    for listener in setup.listeners:
        if listener.transport.allow_link_stealing:
            continue
        unwatched = _unwatched(listener)
        out.append(
            Finding(
                "link-stealing-off",
                WARNING if unwatched else INFO,
                "stalled-socket",
                "a client that reconnects with its client-id is refused while the broker still holds its old connection",
                (
                    setup.show_listener(listener, "allow_link_stealing"),
                    *(
                        (
                            setup.show_listener(listener, "default_heart_beat"),
                            setup.show_listener(listener, "so_write_timeout"),
                        )
                        if unwatched
                        else ()
                    ),
                ),
                "In the stalled-socket story (source: stalled-socket) the consumer's write failed, it reconnected at once, and the broker, which still saw the old "
                "connection as healthy, refused the new one with the same client id, so the consumer gave up. With link "
                "stealing the new connection takes the id over and the old one is closed."
                + (
                    " Here nothing detects the dead connection (no heart-beats, no write timeout), so the id can stay "
                    "taken indefinitely."
                    if unwatched
                    else ""
                ),
                "let a reconnecting client take its client id over",
                (Change("transport.allow_link_stealing", True, listener=listener.name),),
            )
        )
    return out
