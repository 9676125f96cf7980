"""No client can hurt another, before or after it logs in: limits on what a
connection may make the broker hold, on how many connections there are, and
on password guessing (the core on a virtual clock)."""

from __future__ import annotations

from typing import Any

from minibroker.config import parse_config
from minibroker.connection import hash_password
from minibroker.edge import VirtualClient, VirtualNetwork

CHUNK = 64 * 1024
HUGE_CONNECT = b"CONNECT\naccept-version:1.2\nhost:h\ncontent-length:104857600\n\n"


def held(net: VirtualNetwork) -> int:
    """What the broker holds of incomplete frames, by its own account (checked against its parsers),
    and every connection that ended let go of what it held (the teardown checker, when on)."""
    broker = net.broker
    assert broker.partial_bytes == sum(s.parser.buffered for s in broker.sessions.values())
    if net.teardown is not None:
        assert net.teardown.violations == []
    return broker.partial_bytes


def feed(client: VirtualClient, data: bytes) -> None:
    """Write ``data`` a chunk at a time, as a socket delivers it, until the broker closes the connection."""
    for i in range(0, len(data), CHUNK):
        if client.closed:
            return
        client.write(data[i : i + CHUNK])


def error_of(client: VirtualClient) -> str:
    [error] = client.frames("ERROR")
    assert client.closed
    return error.headers["message"]


class TestBeforeLogin:
    def test_a_huge_connect_is_refused_at_its_header_block(self) -> None:
        net = VirtualNetwork(check_teardown=True)
        hostile = [net.client(f"hostile{i}") for i in range(5)]
        for client in hostile:
            feed(client, HUGE_CONNECT + b"x" * (2 * 1024 * 1024))
            assert held(net) <= 16 * 1024
        for client in hostile:
            assert "limit of 16384 bytes before the CONNECT is accepted" in error_of(client)
        assert held(net) == 0 and net.broker.sessions == {}

    def test_anything_before_connect_is_held_to_the_connect_limit(self) -> None:
        net = VirtualNetwork()
        hostile = net.client("hostile")
        feed(hostile, b"SEND\ndestination:/queue/q\n\n" + b"x" * (1024 * 1024))
        assert "before the CONNECT is accepted" in error_of(hostile)
        assert held(net) == 0

    def test_a_header_line_is_refused_while_it_arrives(self) -> None:
        net = VirtualNetwork()
        hostile = net.connected_client("hostile")
        hostile.write(b"SEND\ndestination:/queue/q\nx:")
        for _ in range(160):  # 10 MB, a chunk at a time
            if hostile.closed:
                break
            hostile.write(b"y" * CHUNK)
            assert held(net) <= CHUNK + 10 * 1024
        assert error_of(hostile) == "header line longer than 10240 bytes"

    def test_the_connection_over_max_connections_gets_an_error(self) -> None:
        net = VirtualNetwork(parse_config({"transport": {"max_connections": 2}}))
        first, second = net.connected_client("first"), net.connected_client("second")
        third = net.client("third")
        assert error_of(third).startswith("the broker has reached its limit of 2 connections")
        first.disconnect()
        assert net.connected_client("fourth").frames("CONNECTED")
        second.send("/queue/q", "still served", receipt="r")
        assert second.last().command == "RECEIPT"

    def test_one_address_holding_sockets_before_login_cannot_take_every_slot(self) -> None:
        """Sockets that never send CONNECT, all from one address, fill max_connections
        only up to max_unauthenticated_per_address: the one over is refused with an ERROR
        saying why, and a client from another address still gets in."""
        config = parse_config({"transport": {"max_connections": 5, "max_unauthenticated_per_address": 3}})
        net = VirtualNetwork(config, check_teardown=True)
        held_open = [net.client(f"10.0.0.66:{4000 + i}") for i in range(10)]
        assert [c.closed for c in held_open] == [False] * 3 + [True] * 7
        assert error_of(held_open[3]) == (
            "10.0.0.66 already holds 3 connections that have not logged in "
            "(transport.max_unauthenticated_per_address): connection refused, try again later"
        )
        honest = net.connected_client("10.0.0.7:5000")
        honest.send("/queue/q", "served", receipt="r")
        assert honest.last().command == "RECEIPT"
        held_open[0].connect()  # one of them logs in: its address may open one more
        assert net.client("10.0.0.66:4100").closed is False
        assert net.client("10.0.0.66:4101").closed is True

    def test_a_burst_from_one_address_gets_in_while_half_the_slots_are_free(self) -> None:
        """The cap per address bites only once the connections take more than half of
        max_connections: many honest clients connecting at once from one host (a load
        test, a NAT) are all accepted until then."""
        config = parse_config({"transport": {"max_connections": 20, "max_unauthenticated_per_address": 3}})
        net = VirtualNetwork(config, check_teardown=True)
        burst = [net.client(f"10.0.0.66:{4000 + i}") for i in range(12)]
        assert [c.closed for c in burst] == [False] * 10 + [True] * 2
        for client in burst[:10]:
            client.connect()
            assert client.frames("CONNECTED")
        honest = net.connected_client("10.0.0.7:5000")
        honest.send("/queue/q", "served", receipt="r")
        assert honest.last().command == "RECEIPT"


def small_limits(**transport: Any) -> VirtualNetwork:
    limits = {"partial_frame_memory_limit": "1 mb", "max_frame_size": "1 mb", "max_data_length": "1 mb", **transport}
    return VirtualNetwork(parse_config({"transport": limits}), check_teardown=True)


def partial_send(size: int) -> bytes:
    """The start of a SEND whose body is ``size`` bytes, without its last 1000 bytes and the NUL."""
    return b"SEND\ndestination:/queue/big\ncontent-length:%d\n\n" % size + b"x" * (size - 1000)


class TestAfterLogin:
    def test_incomplete_frames_of_all_connections_together_are_capped(self) -> None:
        net = small_limits()
        slow = [net.connected_client(f"slow{i}") for i in range(3)]
        for client in slow:
            feed(client, partial_send(450 * 1024))
            assert held(net) <= 1024 * 1024
        assert not slow[0].closed and not slow[1].closed
        assert "over its limit of 1048576 (transport.partial_frame_memory_limit)" in error_of(slow[2])
        # The first two finish their frames: nothing held, and the broker takes new ones.
        for client in slow[:2]:
            client.write(b"x" * 1000 + b"\x00")
        assert held(net) == 0 and net.broker.destinations["/queue/big"].size() == 2
        feed(net.connected_client("later"), partial_send(450 * 1024))
        assert held(net) > 400 * 1024

    def test_a_frame_must_arrive_within_the_partial_frame_timeout(self) -> None:
        net = small_limits(partial_frame_timeout=5000)
        stuck, slow = net.connected_client("stuck"), net.connected_client("slow")
        stuck.write(b"SEND\ndestination:/queue/q\n\nnever ends")
        slow.write(b"SEND\ndestination:/queue/q\n\nslow but")
        net.advance(4)
        slow.write(b" whole\x00")
        net.advance(1.5)
        assert "not within 5000 ms (transport.partial_frame_timeout)" in error_of(stuck)
        assert not slow.closed and held(net) == 0
        slow.write(b"SEND\ndestination:/queue/q\n\nagain")  # a new frame: a new 5 s
        net.advance(4)
        assert not slow.closed
        net.advance(1.5)
        assert "not within 5000 ms" in error_of(slow)

    def test_time_the_broker_does_not_read_does_not_count(self) -> None:
        net = VirtualNetwork(
            parse_config(
                {
                    "transport": {"partial_frame_timeout": 5000},
                    "system_usage": {"memory_limit": "64 kb"},
                    "destination_policy": [{"queue": ">", "pending_cursor": "vm"}],
                }
            )
        )
        producer = net.connected_client("producer")
        for _ in range(40):  # fills memory: the broker stops reading the producer (flow control)
            producer.send("/queue/full", "x" * 2000)
        assert producer.reading_paused
        producer.write(b"SEND\ndestination:/queue/other\n\nhalf")
        net.advance(30)
        assert not producer.closed
        consumer = net.connected_client("consumer")
        consumer.subscribe("/queue/full")  # frees memory: the producer is read again
        producer.write(b" and the rest\x00")
        net.advance(1)
        assert not producer.closed and held(net) == 0


PASSWORD_HASH = hash_password("wonderland", iterations=1000)


def secure_net(**transport: Any) -> tuple[VirtualNetwork, list[int]]:
    """A broker with one user, alice; the iterations of every password hash it computes."""
    net = VirtualNetwork(
        parse_config(
            {
                "users": [{"name": "alice", "password_hash": PASSWORD_HASH}],
                "transport": transport,
            }
        )
    )
    calls: list[int] = []
    real = net.broker.security.pbkdf2

    def counted(name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
        calls.append(iterations)
        return real(name, password, salt, iterations)

    net.broker.security.pbkdf2 = counted
    return net, calls


class TestPasswords:
    def test_an_unknown_user_costs_the_same_hash_as_a_wrong_passcode(self) -> None:
        net, calls = secure_net()
        for login, passcode in [
            ("alice", "wrong"),
            ("mallory", "wonderland"),
            ("alice", None),
            ("alice", "wonderland"),
        ]:
            headers = {"login": login, **({"passcode": passcode} if passcode is not None else {})}
            net.client(login).connect(**headers)
        assert calls == [1000, 1000, 1000, 1000]

    def test_the_connection_is_not_read_while_its_login_is_checked(self) -> None:
        net, _ = secure_net()
        client = net.client("alice")
        # CONNECT and a SEND in one write: the SEND is parsed in the version the CONNECT negotiates.
        client.send_raw(
            b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wonderland\n\n\x00"
            b"SEND\ndestination:/queue/a\\cb\nreceipt:r\n\nbody\x00"
        )
        assert [f.command for f in client.received] == ["CONNECTED", "RECEIPT"]
        assert "/queue/a:b" in net.broker.destinations

    def test_refusals_from_an_address_that_keeps_failing_are_delayed(self) -> None:
        net, _ = secure_net(login_failures_before_delay=2, login_failure_delay=1000)

        def guess(peer: str) -> VirtualClient:
            client = net.client(peer)
            client.send_frame("CONNECT", {"accept-version": "1.2", "login": "alice", "passcode": "guess"})
            return client

        for _ in range(2):
            assert guess("10.0.0.9:4000").frames("ERROR")  # the first failures: refused at once
        for delay in (1.0, 2.0, 4.0):
            client = guess("10.0.0.9:4001")
            net.advance(delay - 0.01)
            assert client.frames("ERROR") == [] and not client.closed
            net.advance(0.02)
            assert error_of(client) == "User name [alice] or password is invalid."
        assert guess("10.0.0.7:4000").frames("ERROR")  # another address is not held back
        good = net.client("10.0.0.9:4002")
        assert good.connect(login="alice", passcode="wonderland").command == "CONNECTED"
        assert guess("10.0.0.9:4003").frames("ERROR")  # a success from the address starts it afresh

    def test_a_connect_without_credentials_is_refused_at_once_and_guesses_nothing(self) -> None:
        """A page or tool connecting anonymously to a broker with users (the console before
        its login form) is told at once, however often it comes, and is no password guess."""
        net, _ = secure_net(login_failures_before_delay=2, login_failure_delay=1000)
        for port in range(4000, 4010):
            client = net.client(f"10.0.0.9:{port}")
            client.send_frame("CONNECT", {"accept-version": "1.2"})
            assert error_of(client) == "User name [] or password is invalid."
        for port in range(4010, 4012):  # nor does it count toward the address's failures
            client = net.client(f"10.0.0.9:{port}")
            client.send_frame("CONNECT", {"accept-version": "1.2", "login": "alice", "passcode": "guess"})
            assert error_of(client) == "User name [alice] or password is invalid."
