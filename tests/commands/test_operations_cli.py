"""The admin operations on the real server: ``minibroker purge | delete | close |
browse | move`` and the protocol itself from a third-party client (stomp.py)."""

from __future__ import annotations

import json
from typing import Any

from clients.cli import main as cli
from minibroker.config import parse_config
from minibroker.connection import hash_password
from stomp_py_support import close, connect, subscribe_sync, wait_for


def port_args(broker: Any, *extra: str) -> list[str]:
    return ["--port", str(broker.port), *extra]


def send_all(conn: Any, address: str, bodies: list[str], **headers: str) -> None:
    """Send each body with a receipt (so the broker holds them all on return)."""
    for i, body in enumerate(bodies):
        conn.send(address, body, headers={**headers, "receipt": f"{address}-{i}-{body}"})


def statistics(broker: Any, capsys: Any, *args: str) -> dict[str, Any]:
    assert cli(["stat", "--json", *port_args(broker), *args]) == 0
    return json.loads(capsys.readouterr().out)


def size_of(stats: dict[str, Any], address: str) -> int | None:
    return next((d["size"] for d in stats["destinations"] if d["destinationName"] == address), None)


def test_purge_and_delete(broker, capsys) -> None:
    conn, listener = connect(broker)
    try:
        send_all(conn, "/queue/orders", ["a", "b", "c"], persistent="true")
        send_all(conn, "/queue/old", ["x"])
        assert wait_for(lambda: len(listener.receipts) == 4)
        assert cli(["purge", "/queue/orders", *port_args(broker)]) == 0
        assert capsys.readouterr().out == "purged 3 messages from /queue/orders (none left)\n"
        assert cli(["delete", "/queue/old", *port_args(broker)]) == 0
        assert capsys.readouterr().out == "deleted /queue/old (1 message dropped)\n"
        stats = statistics(broker, capsys)
        assert size_of(stats, "/queue/orders") == 0 and size_of(stats, "/queue/old") is None
    finally:
        close(conn)


def test_a_refused_operation_is_the_brokers_error_and_status_1(broker, capsys) -> None:
    assert cli(["purge", "/queue/none", *port_args(broker)]) == 1
    assert (
        capsys.readouterr().err == "minibroker purge: broker refused: cannot purge /queue/none: no such destination\n"
    )
    assert cli(["close", "x", *port_args(broker)]) == 2
    assert "bad CONNECTION 'x'" in capsys.readouterr().err


def test_close_a_connection_by_the_id_stat_shows(broker, capsys) -> None:
    victim, listener = connect(broker, headers={"client-id": "victim"})
    try:
        connections = statistics(broker, capsys, "--connections")["connections"]
        [vid] = [c["connection"] for c in connections if c["clientId"] == "victim"]
        assert cli(["close", str(vid), *port_args(broker)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"closed connection {vid} from 127.0.0.1:") and "client-id victim" in out
        assert wait_for(lambda: listener.errors)
        assert listener.errors[0].headers["message"] == "closed by an administrator (user anonymous)"
        assert listener.disconnected.wait(10)
    finally:
        close(victim)


def test_browse_shows_messages_without_taking_them(broker, capsys) -> None:
    conn, listener = connect(broker)
    try:
        send_all(conn, "/queue/look", ["first", "second", "third"], colour="red")
        assert wait_for(lambda: len(listener.receipts) == 3)
        assert cli(["browse", "/queue/look", "--count", "2", *port_args(broker)]) == 0
        out = capsys.readouterr().out
        assert out.startswith("/queue/look: 3 messages, 3 waiting for a consumer; the first 2 waiting shown\n")
        assert "  colour: red" in out and "  body (5 bytes): first" in out and "second" in out and "third" not in out
        assert cli(["browse", "/queue/look", "--json", *port_args(broker)]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert [m["body"] for m in answer["messages"]] == ["first", "second", "third"]
        subscribe_sync(conn, listener, "/queue/look", "s")
        assert [m.body for m in listener.take(3)] == ["first", "second", "third"]
    finally:
        close(conn)


def test_move_dead_letters_back_and_with_a_selector(broker, capsys) -> None:
    conn, listener = connect(broker)
    try:
        send_all(conn, "/queue/ActiveMQ.DLQ", ["o1", "o2"], **{"original-destination": "/queue/orders"})
        send_all(conn, "/queue/mixed", ["r1", "b1", "r2"], persistent="true")
        conn.send("/queue/mixed", "r3", headers={"colour": "red", "receipt": "c"})
        assert wait_for(lambda: len(listener.receipts) == 6)
        assert cli(["move", "/queue/ActiveMQ.DLQ", *port_args(broker)]) == 0
        assert capsys.readouterr().out == "moved 2 messages from /queue/ActiveMQ.DLQ: 2 to /queue/orders\n"
        assert cli(["move", "/queue/mixed", "/queue/reds", "--selector", "colour = 'red'", *port_args(broker)]) == 0
        assert capsys.readouterr().out == "moved 1 message from /queue/mixed to /queue/reds\n"
        subscribe_sync(conn, listener, "/queue/orders", "o")
        assert sorted(m.body for m in listener.take(2)) == ["o1", "o2"]
        subscribe_sync(conn, listener, "/queue/reds", "r")
        assert listener.take(1)[0].body == "r3"
        assert cli(["move", "/queue/mixed", "/topic/t", *port_args(broker)]) == 1
        assert "broker refused: cannot move to /topic/t: not a queue" in capsys.readouterr().err
    finally:
        close(conn)


def test_a_move_whose_selector_matches_nothing_says_so(broker, capsys) -> None:
    """``priority`` in a selector is not the STOMP priority header (that is
    JMSPriority, as in ActiveMQ): the move names its target, says the selector
    matched none of the waiting messages, and why; JMSPriority moves them."""
    for priority in ("7", "7", "7", "1"):
        assert cli(["send", "/queue/a", "m", "--priority", priority, "--receipt", *port_args(broker)]) == 0
    capsys.readouterr()
    assert (
        cli(["move", "/queue/a", "/queue/b", "--selector", "priority > 4", "--count", "100", *port_args(broker)]) == 0
    )
    assert capsys.readouterr().out == (
        "moved 0 messages from /queue/a to /queue/b: the selector 'priority > 4' matched none of the "
        "4 messages waiting (a STOMP priority header is JMSPriority in a selector, as in ActiveMQ)\n"
    )
    assert (
        cli(["move", "/queue/a", "/queue/b", "--selector", "JMSPriority > 4", "--count", "100", *port_args(broker)])
        == 0
    )
    assert capsys.readouterr().out == "moved 3 messages from /queue/a to /queue/b\n"
    assert cli(["move", "/queue/b", "/queue/a", "--selector", "JMSPriority > 4", *port_args(broker)]) == 0
    assert cli(["move", "/queue/b", "/queue/a", *port_args(broker)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "moved 0 messages from /queue/b to /queue/a (/queue/b has no message waiting for a consumer)"
    )


def test_any_stomp_client_speaks_the_admin_protocol(broker) -> None:
    conn, listener = connect(broker)
    try:
        send_all(conn, "/queue/work", ["1", "2"])
        subscribe_sync(conn, listener, "/temp-queue/admin", "admin")
        conn.send(
            "/queue/ActiveMQ.Admin.Purge",
            "",
            headers={"target": "/queue/work", "reply-to": "/temp-queue/admin", "correlation-id": "p1"},
        )
        [reply] = listener.take(1)
        assert reply.headers["correlation-id"] == "p1" and reply.headers["content-type"] == "application/json"
        assert json.loads(reply.body) == {"operation": "purge", "destination": "/queue/work", "purged": 2, "size": 0}
    finally:
        close(conn)


def secure_broker(broker_factory: Any) -> Any:
    users = [("alice", "wonderland", ["admins"]), ("carol", "singer", ["consumers"])]
    return broker_factory(
        parse_config(
            {
                "users": [
                    {"name": n, "password_hash": hash_password(p, iterations=1000), "groups": g} for n, p, g in users
                ],
                "authorization": [
                    {
                        "queue": ">",
                        "read": ["admins", "consumers"],
                        "write": ["admins", "consumers"],
                        "admin": ["admins"],
                    },
                ],
            }
        )
    )


def test_only_an_admin_may(broker_factory, capsys) -> None:
    rb = secure_broker(broker_factory)
    alice, listener = connect(rb, username="alice", passcode="wonderland")
    try:
        send_all(alice, "/queue/orders", ["a"])
        assert wait_for(lambda: len(listener.receipts) == 1)
        for argv in (
            ["purge", "/queue/orders"],
            ["browse", "/queue/orders"],
            ["delete", "/queue/orders"],
            ["move", "/queue/orders", "/queue/b"],
            ["close", "1"],
        ):
            assert cli([*argv, *port_args(rb), "--login", "carol", "--passcode", "singer"]) == 1
            operation = argv[0]
            assert capsys.readouterr().err == (
                f"minibroker {operation}: broker refused: User carol is not authorized to {operation}: "
                f"queue://ActiveMQ.Admin.{operation.capitalize()} (the admin right is needed)\n"
            )
        assert cli(["purge", "/queue/orders", *port_args(rb), "--login", "alice", "--passcode", "wonderland"]) == 0
        assert capsys.readouterr().out.startswith("purged 1 message from")
    finally:
        close(alice)
