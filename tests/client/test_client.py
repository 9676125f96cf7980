"""StompClient against the fake server: handshake, frames on the wire, errors."""

from __future__ import annotations

import asyncio
import socket

import pytest

from clients.stomp import (
    CannotConnect,
    ConnectionLost,
    StompClient,
    StompError,
    Subscription,
    SubscriptionClosed,
)
from minibroker.frames import Frame

from .fake_server import FakeStompServer


async def connect(server: FakeStompServer, **options) -> StompClient:
    return await StompClient.connect(server.host, server.port, connect_timeout=5, **options)


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- handshake
async def test_connect_offers_every_version_and_gets_the_highest(server) -> None:
    client = await connect(server, login="u", passcode="p", client_id="c1", vhost="vh", extra_headers={"x-extra": "1"})
    conn = await server.connection()
    connect_frame = conn.frames[0]
    assert connect_frame.command == "CONNECT"
    assert connect_frame.headers == {
        "accept-version": "1.0,1.1,1.2",
        "heart-beat": "0,0",
        "host": "vh",
        "login": "u",
        "passcode": "p",
        "client-id": "c1",
        "x-extra": "1",
    }
    assert (client.version, client.server, client.session) == ("1.2", "FakeStomp/0.1", "fake-session-1")
    await client.disconnect()
    assert await client.closed is None


async def test_connect_10_only_sends_no_accept_version(server) -> None:
    client = await connect(server, versions=("1.0",), vhost=None)
    conn = await server.connection()
    assert conn.frames[0].headers == {}
    assert client.version == "1.0"  # CONNECTED had no version header
    assert "version" not in client.connected_headers
    await client.disconnect()


@pytest.mark.parametrize("server_versions, expected", [(("1.0", "1.1"), "1.1"), (("1.0",), "1.0")])
async def test_version_is_the_brokers_choice(make_server, server_versions, expected) -> None:
    server = await make_server(versions=server_versions)
    client = await connect(server)
    assert client.version == expected
    await client.disconnect()


async def test_no_common_version_is_a_stomp_error(make_server) -> None:
    server = await make_server(versions=("1.2",))
    with pytest.raises(StompError) as info:
        await connect(server, versions=("1.0", "1.1"))
    assert "Supported protocol versions are 1.2" in info.value.message


async def test_a_version_not_offered_is_refused(make_server) -> None:
    server = await make_server(connected_headers={"version": "1.1"})
    with pytest.raises(ConnectionLost, match="1.1"):
        await connect(server, versions=("1.2",))


async def test_refused_connect_raises_stomp_error_with_message(make_server) -> None:
    server = await make_server(refuse="User name [x] or password is invalid.")
    with pytest.raises(StompError) as info:
        await connect(server, login="x")
    assert info.value.message == "User name [x] or password is invalid."
    assert info.value.headers["message"] == info.value.message


async def test_connection_refused_is_cannot_connect() -> None:
    port = free_port()
    with pytest.raises(CannotConnect) as info:
        await StompClient.connect("127.0.0.1", port, connect_timeout=5)
    assert str(info.value) == f"cannot connect to 127.0.0.1:{port}: connection refused"


async def test_unresolvable_host_is_cannot_connect() -> None:
    with pytest.raises(CannotConnect, match="cannot resolve host"):
        await StompClient.connect("no-such-host.invalid", 61613, connect_timeout=5)


async def test_no_connected_frame_times_out() -> None:
    handled = asyncio.Event()

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # until the client gives up and hangs up
            writer.close()
            await writer.wait_closed()
        except ConnectionError:
            pass
        finally:
            handled.set()

    mute_server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = mute_server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(CannotConnect, match="no CONNECTED frame within 0.2s"):
            await StompClient.connect("127.0.0.1", port, connect_timeout=0.2)
        await asyncio.wait_for(handled.wait(), 5)
    finally:
        mute_server.close()
        await mute_server.wait_closed()


async def test_connect_headers_with_newlines_are_refused(server) -> None:
    with pytest.raises(ValueError, match="never escaped"):
        await connect(server, login="a\nb")


async def test_socket_buffers_are_set_before_connect(server) -> None:
    client = await connect(server, sndbuf=16384, rcvbuf=16384)
    sock = client.get_extra_info("socket")
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        assert 16384 <= sock.getsockopt(socket.SOL_SOCKET, option) <= 2 * 16384  # Linux doubles
    await client.disconnect()


# ---------------------------------------------------------------- send, subscribe
async def test_send_with_receipt_waits_for_it(server) -> None:
    client = await connect(server)
    await client.send("/queue/a", "héllo", {"k": "v", "persistent": "true"}, receipt=True)
    conn = await server.connection()
    send = conn.frames[1]
    assert send.command == "SEND"
    assert send.headers["destination"] == "/queue/a"
    assert send.headers["k"] == "v" and send.headers["persistent"] == "true"
    assert send.headers["receipt"].startswith("r-")
    assert send.body == "héllo".encode()
    await client.disconnect()


async def test_receipt_wait_has_a_timeout(make_server) -> None:
    server = await make_server(auto_receipts=False)
    client = await connect(server)
    with pytest.raises(TimeoutError):
        await client.send("/queue/a", b"x", receipt=True, timeout=0.05)
    client.close()


async def test_headers_are_escaped_per_version(make_server) -> None:
    for versions in (("1.1",), ("1.2",)):
        server = await make_server()
        client = await connect(server, versions=versions)
        await client.send("/queue/a", b"", {"a:b": "x\ny\\z"}, receipt=True)
        conn = await server.connection()
        assert conn.frames[1].headers["a:b"] == "x\ny\\z"
        await client.disconnect()


async def test_stomp_10_refuses_headers_it_cannot_carry(server) -> None:
    client = await connect(server, versions=("1.0",))
    with pytest.raises(ValueError, match="1.0"):
        await client.send("/queue/a", b"", {"k": "two\nlines"})
    await client.disconnect()


async def test_subscribe_and_receive(server) -> None:
    server.preload("/queue/a", [b"one", b"two"], {"app": "x"})
    client = await connect(server)
    sub = await client.subscribe("/queue/a", prefetch=10, selector="app = 'x'", headers={"activemq.exclusive": "true"})
    conn = await server.connection()
    subscribe = conn.frames[1]
    assert subscribe.headers == {
        "destination": "/queue/a",
        "id": sub.id,
        "ack": "auto",
        "activemq.prefetchSize": "10",
        "selector": "app = 'x'",
        "activemq.exclusive": "true",
        "receipt": subscribe.headers["receipt"],
    }
    first = await sub.get(timeout=5)
    second = await sub.get(timeout=5)
    assert [first.body, second.body] == [b"one", b"two"]
    assert first.destination == "/queue/a" and first.subscription == sub.id
    assert first.headers["app"] == "x" and first.message_id and not first.redelivered
    await client.disconnect()


async def test_get_times_out(server) -> None:
    client = await connect(server)
    sub = await client.subscribe("/queue/empty")
    with pytest.raises(TimeoutError):
        await sub.get(timeout=0.05)
    await client.disconnect()


async def test_messages_are_routed_by_subscription_id(server) -> None:
    client = await connect(server)
    a = await client.subscribe("/queue/a")
    b = await client.subscribe("/queue/b")
    await client.send("/queue/b", b"for b")
    await client.send("/queue/a", b"for a")
    assert (await a.get(timeout=5)).body == b"for a"
    assert (await b.get(timeout=5)).body == b"for b"
    with pytest.raises(ValueError, match="already in use"):
        await client.subscribe("/queue/c", id=a.id)
    with pytest.raises(ValueError, match="ack must be"):
        await client.subscribe("/queue/c", ack="sometimes")
    await client.disconnect()


async def test_a_10_message_without_subscription_goes_by_destination(server) -> None:
    client = await connect(server, versions=("1.0",))
    a = await client.subscribe("/queue/a")
    b = await client.subscribe("/queue/b")
    conn = await server.connection()
    conn.send(Frame("MESSAGE", {"destination": "/queue/b", "message-id": "m-1"}, b"x"))
    message = await b.get(timeout=5)
    assert message.subscription == b.id and a.pending == 0
    await client.disconnect()


async def test_async_for_ends_at_unsubscribe(server) -> None:
    server.preload("/queue/a", [b"1", b"2", b"3"])
    client = await connect(server)
    sub = await client.subscribe("/queue/a")
    conn = await server.connection()
    await conn.wait_for(lambda c: sub.received == 3)
    await sub.unsubscribe()
    assert conn.frames[-1].command == "UNSUBSCRIBE" and conn.frames[-1].headers["id"] == sub.id
    assert [m.body async for m in sub] == [b"1", b"2", b"3"]  # buffered ones are kept
    with pytest.raises(SubscriptionClosed):
        await sub.get(timeout=1)
    await client.disconnect()


async def test_on_message_callback_bypasses_the_buffer(server) -> None:
    got: list[bytes] = []
    client = await connect(server)
    sub = await client.subscribe("/queue/a", on_message=lambda m: got.append(m.body))
    for i in range(3):
        await client.send("/queue/a", str(i))
    await client.disconnect()
    assert got == [b"0", b"1", b"2"] and sub.pending == 0


async def paused_consumer(server: FakeStompServer) -> tuple[StompClient, Subscription]:
    """A client that stopped reading with 20 messages sent and 4 allowed to wait."""
    server.preload("/queue/a", [str(i).encode() for i in range(20)])
    client = await connect(server, max_buffered=4)
    sub = await client.subscribe("/queue/a")
    await (await server.connection()).wait_for(lambda c: client.reading_paused)
    return client, sub


async def test_reading_pauses_while_too_many_messages_wait(server) -> None:
    client, sub = await paused_consumer(server)
    bodies = [(await sub.get(timeout=5)).body for _ in range(20)]
    assert bodies == [str(i).encode() for i in range(20)]
    assert not client.reading_paused
    await client.disconnect()


async def test_writes_wait_for_a_stalled_broker(server) -> None:
    client = await connect(server, sndbuf=4096)
    conn = await server.connection()
    conn.stop_reading()
    body = b"x" * 1024
    with pytest.raises(TimeoutError):
        for _ in range(100_000):  # kernel buffers fill up well before this
            await client.send("/queue/a", body, timeout=0.2)
    client.close()


async def test_a_producer_that_never_waits_still_lets_the_loop_run(make_server) -> None:
    server = await make_server(error_on_send={"/queue/full": "Usage Manager Memory Limit reached"})
    client = await connect(server)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(ticker())
    with pytest.raises(StompError, match="Memory Limit"):
        for _ in range(1_000_000):  # no receipts: only the ERROR can stop this
            await client.send("/queue/full", b"x" * 100)
    other.cancel()
    assert ticks > 1


async def test_a_receipt_is_read_even_while_reading_is_paused(server) -> None:
    client, sub = await paused_consumer(server)
    await client.send("/queue/b", b"x", receipt=True, timeout=5)  # behind the unread messages
    assert sub.pending == 20
    await client.disconnect(timeout=5)
    assert await client.closed is None


# ---------------------------------------------------------------- ack, nack, transactions
EXPECTED_ACK = {
    "1.2": lambda m, sub: {"id": m.headers["ack"]},
    "1.1": lambda m, sub: {"subscription": sub.id, "message-id": m.message_id},
    "1.0": lambda m, sub: {"message-id": m.message_id},
}


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("mode", ["client", "client-individual"])
async def test_ack_and_nack_headers(server, version, mode) -> None:
    server.preload("/queue/a", [b"1", b"2"])
    client = await connect(server, versions=(version,))
    sub = await client.subscribe("/queue/a", ack=mode)
    conn = await server.connection()
    assert conn.frames[1].headers["ack"] == mode
    first, second = await sub.get(timeout=5), await sub.get(timeout=5)
    if version == "1.2":
        assert first.headers["ack"] != first.message_id  # the fake's ack ids differ from message ids
    await client.ack(first, receipt=True)
    ack = await conn.wait_frame("ACK")
    assert {k: v for k, v in ack.headers.items() if k != "receipt"} == EXPECTED_ACK[version](first, sub)
    if version == "1.0":
        with pytest.raises(ValueError, match="NACK"):
            await client.nack(second)
    else:
        await client.nack(second, receipt=True)
        nack = await conn.wait_frame("NACK")
        assert {k: v for k, v in nack.headers.items() if k != "receipt"} == EXPECTED_ACK[version](second, sub)
    await client.disconnect()


async def test_transaction_frames(server) -> None:
    server.preload("/queue/in", [b"m"])
    client = await connect(server)
    sub = await client.subscribe("/queue/in", ack="client-individual")
    message = await sub.get(timeout=5)
    async with client.transaction() as tx:
        await tx.send("/queue/out", b"1")
        await client.send("/queue/out", b"2", transaction=tx)
        await tx.ack(message)
    assert tx.state == "committed"
    conn = await server.connection()
    tail = conn.frames[2:]
    assert [f.command for f in tail] == ["BEGIN", "SEND", "SEND", "ACK", "COMMIT"]
    assert all(f.headers["transaction"] == tx.id for f in tail)
    assert "receipt" in tail[-1].headers  # COMMIT waits for its receipt by default

    with pytest.raises(RuntimeError, match="boom"):
        async with client.transaction("t-abort") as tx2:
            await tx2.send("/queue/out", b"3")
            raise RuntimeError("boom")
    assert tx2.state == "aborted"
    assert conn.frames[-1].command == "ABORT" and conn.frames[-1].headers["transaction"] == "t-abort"
    with pytest.raises(RuntimeError, match="aborted"):
        await tx2.commit()
    await client.disconnect()


# ---------------------------------------------------------------- errors and loss
async def test_error_for_a_receipted_send(make_server) -> None:
    server = await make_server(error_on_send={"/queue/full": "Usage Manager Memory Limit reached"})
    client = await connect(server)
    sub = await client.subscribe("/queue/other")
    with pytest.raises(StompError) as info:
        await client.send("/queue/full", b"x", receipt=True)
    error = info.value
    assert error.message == "Usage Manager Memory Limit reached"
    assert error.receipt_id is not None
    assert client.errors == [error]
    # The broker closed after the ERROR: every later use fails with the same error.
    assert await asyncio.wait_for(client.closed, 5) is error
    with pytest.raises(StompError):
        await sub.get(timeout=1)
    with pytest.raises(StompError):
        await client.send("/queue/a", b"y")


async def test_error_wakes_a_waiting_get(server) -> None:
    client = await connect(server)
    sub = await client.subscribe("/queue/a")
    conn = await server.connection()
    waiting = asyncio.ensure_future(sub.get(timeout=5))
    await asyncio.sleep(0)
    conn.error("bad ack", close=False, body=b"java.lang.IllegalStateException")
    with pytest.raises(StompError) as info:
        await waiting
    assert info.value.message == "bad ack" and info.value.body.startswith(b"java")
    # ActiveMQ leaves the connection open after such an ERROR: delivery goes on.
    await client.send("/queue/a", b"after")
    assert (await sub.get(timeout=5)).body == b"after"
    await client.disconnect()


async def test_error_is_queued_behind_earlier_messages(server) -> None:
    server.preload("/queue/a", [b"before"])
    client = await connect(server)
    sub = await client.subscribe("/queue/a")
    conn = await server.connection()
    await conn.wait_for(lambda c: sub.received == 1)
    conn.error("going away")
    await asyncio.wait_for(client.closed, 5)
    assert (await sub.get(timeout=1)).body == b"before"
    for _ in range(2):
        with pytest.raises(StompError, match="going away"):
            await sub.get(timeout=1)


async def test_broker_hanging_up_is_connection_lost(server) -> None:
    client = await connect(server)
    sub = await client.subscribe("/queue/a")
    waiting = asyncio.ensure_future(sub.get(timeout=5))
    (await server.connection()).close()
    with pytest.raises(ConnectionLost, match="closed the connection"):
        await waiting
    assert isinstance(await client.closed, ConnectionLost)
    with pytest.raises(ConnectionLost):
        await client.send("/queue/a", b"x")


async def test_malformed_frame_from_broker_is_connection_lost(server) -> None:
    client = await connect(server)
    (await server.connection()).send_raw(b"BOGUS\n\n\x00")
    lost = await asyncio.wait_for(client.closed, 5)
    assert isinstance(lost, ConnectionLost) and "malformed" in lost.reason


async def test_disconnect_closes_subscriptions_cleanly(server) -> None:
    async with await connect(server) as client:
        sub = await client.subscribe("/queue/a")
    conn = await server.connection()
    assert conn.commands()[-1] == "DISCONNECT" and "receipt" in conn.frames[-1].headers
    assert await client.closed is None
    assert [m async for m in sub] == []
    await client.disconnect()  # a no-op once closed


# ---------------------------------------------------------------- heart-beats
async def test_heartbeats_are_sent_when_idle(make_server) -> None:
    server = await make_server(heartbeat=(0, 20))
    client = await connect(server, heartbeat=(20, 0))
    conn = await server.connection()
    assert conn.frames[0].headers["heart-beat"] == "20,0"
    assert client.heartbeat == (20, 0)
    await conn.wait_for(lambda c: c.beats >= 3)
    assert conn.commands() == ["CONNECT"]
    await client.disconnect()


async def test_no_heartbeats_when_the_broker_wants_none(server) -> None:
    client = await connect(server, heartbeat=(10, 0))
    assert client.heartbeat == (0, 0)
    await asyncio.sleep(0.1)
    assert (await server.connection()).beats == 0
    await client.disconnect()


async def test_a_silent_broker_is_detected(make_server) -> None:
    server = await make_server(heartbeat=(20, 0), send_heartbeats=False)
    client = await connect(server, heartbeat=(0, 20))
    assert client.heartbeat == (0, 20)
    sub = await client.subscribe("/queue/a")
    lost = await asyncio.wait_for(client.closed, 5)
    assert isinstance(lost, ConnectionLost) and "heart-beat" in lost.reason
    with pytest.raises(ConnectionLost, match="heart-beat"):
        await sub.get(timeout=1)


async def test_a_beating_broker_is_not_dropped(make_server) -> None:
    server = await make_server(heartbeat=(20, 0))
    client = await connect(server, heartbeat=(0, 20), heartbeat_grace=5)
    conn = await server.connection()
    await conn.wait_for(lambda c: c.beats_sent >= 10)
    assert not client.is_closed
    await client.disconnect()
    assert await client.closed is None
