"""The admin operations over STOMP (purge, delete, close, browse, move), in the
core on the virtual clock: what each does, what each refuses, and who may."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from minibroker.config import parse_config
from minibroker.connection import hash_password
from minibroker.edge import VirtualClient, VirtualNetwork

BODY = "x" * 976


def ask(client: VirtualClient, operation: str, **headers: str) -> dict[str, Any]:
    """Send an admin request and return its JSON answer (the client's last MESSAGE)."""
    if not any(r.headers["receipt-id"] == "admin-replies" for r in client.frames("RECEIPT")):
        client.subscribe("/temp-queue/admin", "admin-replies", receipt="admin-replies")
    before = len(client.messages())
    client.send(f"/queue/ActiveMQ.Admin.{operation}", "", **{"reply-to": "/temp-queue/admin", **headers})
    replies = client.messages()[before:]
    error = client.frames("ERROR")
    assert not error, error[0].headers["message"]
    assert len(replies) == 1 and replies[0].headers["content-type"] == "application/json"
    return json.loads(replies[0].body)


def refusal(client: VirtualClient, operation: str, **headers: str) -> str:
    """Send an admin request that must be refused; the ERROR's message."""
    client.send(f"/queue/ActiveMQ.Admin.{operation}", "", **headers)
    [error] = client.frames("ERROR")
    assert client.closed
    return error.headers["message"]


def fill(net: VirtualNetwork, address: str, count: int, **headers: str) -> None:
    p = net.connected_client()
    for i in range(count):
        p.send(address, f"m{i}", **headers)
    p.disconnect()


def persistent_net(tmp_path: Path, doc: dict | None = None) -> VirtualNetwork:
    return VirtualNetwork(parse_config(doc or {}), data_dir=tmp_path / "data")


class TestPurge:
    def test_purge_drops_waiting_messages_cached_and_store_only_and_not_after_a_restart(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path, {"system_usage": {"memory_limit": "100 kb"}})
        p = net.connected_client()
        for _ in range(200):  # past the cursor's mark: most are store-only
            p.send("/queue/deep", BODY, persistent="true")
        queue = net.broker.destinations["/queue/deep"]
        assert len(queue.cursor.store_only) > 0 and len(queue.pending) > 0
        admin = net.connected_client()
        answer = ask(admin, "Purge", target="/queue/deep", receipt="done")
        assert answer == {"operation": "purge", "destination": "/queue/deep", "purged": 200, "size": 0}
        assert admin.frames("RECEIPT")[-1].headers["receipt-id"] == "done"
        assert queue.size() == 0 and queue.memory.usage == 0
        net.restart()
        c = net.connected_client()
        c.subscribe("/queue/deep")
        assert c.bodies() == []

    def test_purge_leaves_unacknowledged_messages_with_their_consumer(self) -> None:
        net = VirtualNetwork()
        fill(net, "/queue/work", 5)
        c = net.connected_client()
        c.subscribe("/queue/work", "s", "client-individual", **{"activemq.prefetchSize": "2"})
        assert ask(net.connected_client(), "Purge", target="/queue/work")["purged"] == 3
        c.ack(c.messages()[0])
        c.ack(c.messages()[1])
        assert len(c.messages()) == 2 and net.broker.destinations["/queue/work"].size() == 0

    def test_purge_needs_an_existing_queue(self) -> None:
        net = VirtualNetwork()
        assert (
            refusal(net.connected_client(), "Purge", target="/queue/nothing")
            == "cannot purge /queue/nothing: no such destination"
        )
        net.connected_client().subscribe("/topic/t")
        assert "purge needs a queue" in refusal(net.connected_client(), "Purge", target="/topic/t")
        assert (
            refusal(net.connected_client(), "Purge")
            == "an admin purge needs a target header: the destination's address, e.g. /queue/orders"
        )


class TestDelete:
    @pytest.mark.parametrize("layout", ["growing", "ring"])
    def test_delete_removes_a_queue_and_its_messages(self, tmp_path: Path, layout: str) -> None:
        net = persistent_net(tmp_path, {"store": {"layout": layout}})
        fill(net, "/queue/old", 3, persistent="true")
        answer = ask(net.connected_client(), "Delete", target="/queue/old")
        assert answer == {"operation": "delete", "destination": "/queue/old", "purged": 3}
        assert "/queue/old" not in net.broker.destinations
        net.restart()
        assert "/queue/old" not in net.broker.destinations

    def test_a_destination_in_use_is_not_deleted(self) -> None:
        net = VirtualNetwork()
        c = net.connected_client()
        c.subscribe("/queue/busy")
        message = refusal(net.connected_client(), "Delete", target="/queue/busy")
        assert message == f"cannot delete /queue/busy: it has 1 consumer(s) on connection(s) {c.sid}; close them first"
        assert "/queue/busy" in net.broker.destinations
        owner = net.connected_client()
        owner.subscribe("/temp-queue/mine", "t")
        [temp] = [a for a in net.broker.destinations if a.startswith("/remote-temp-queue/")]
        owner.subscribe("/queue/other", "o")  # not the temp queue's consumer: the owner's subscription is
        assert "goes when its connection closes" in refusal(net.connected_client(), "Delete", target=temp)

    def test_deleting_a_topic_drops_its_durable_subscriptions(self) -> None:
        net = VirtualNetwork()
        d = net.client()
        d.connect(client_id="c1")
        d.subscribe("/topic/news", "d", **{"activemq.subscriptionName": "keep"})
        d.disconnect()
        fill(net, "/topic/news", 4)
        assert ask(net.connected_client(), "Delete", target="/topic/news")["purged"] == 4
        d = net.client()
        d.connect(client_id="c1")
        d.subscribe("/topic/news", "d", **{"activemq.subscriptionName": "keep"})
        assert d.bodies() == []


class TestClose:
    def test_close_sends_the_connection_an_error_and_returns_its_messages(self) -> None:
        net = VirtualNetwork(check_teardown=True)  # and the close leaves nothing behind
        fill(net, "/queue/q", 2)
        victim = net.client("victim")
        victim.connect(client_id="victim")
        victim.subscribe("/queue/q", "s", "client")
        assert len(victim.messages()) == 2
        answer = ask(net.connected_client(), "Close", connection=str(victim.sid))
        assert answer == {
            "operation": "close",
            "connection": victim.sid,
            "remoteAddress": victim.name,
            "clientId": "victim",
            "user": "anonymous",
        }
        assert victim.closed
        assert victim.frames("ERROR")[0].headers["message"] == "closed by an administrator (user anonymous)"
        assert net.broker.destinations["/queue/q"].size() == 2 and "victim" not in net.broker.client_ids

    def test_a_connection_may_close_itself_after_its_answer(self) -> None:
        net = VirtualNetwork()
        me = net.connected_client()
        me.subscribe("/temp-queue/admin", "r")
        me.send("/queue/ActiveMQ.Admin.Close", "", connection=str(me.sid), **{"reply-to": "/temp-queue/admin"})
        assert json.loads(me.messages()[0].body)["connection"] == me.sid
        assert me.closed and me.last().command == "ERROR"

    def test_close_by_the_session_connected_announced(self) -> None:
        net = VirtualNetwork()
        victim = net.client("victim")
        session = victim.connect().headers["session"]
        assert ask(net.connected_client(), "Close", connection=session)["connection"] == victim.sid
        assert victim.closed

    def test_close_needs_a_connected_id(self) -> None:
        net = VirtualNetwork()
        assert (
            refusal(net.connected_client(), "Close", connection="99")
            == "cannot close connection 99: no such connection"
        )
        assert "must be an integer" in refusal(net.connected_client(), "Close", connection="x")


class TestBrowse:
    def test_browse_shows_the_first_messages_and_leaves_them(self) -> None:
        net = VirtualNetwork()
        p = net.connected_client()
        for i in range(5):
            p.send("/queue/look", f"m{i}", custom=str(i), persistent="true", priority="6")
        answer = ask(net.connected_client(), "Browse", target="/queue/look", count="3")
        assert answer["destination"] == "/queue/look" and answer["size"] == answer["readyCount"] == 5
        assert [m["body"] for m in answer["messages"]] == ["m0", "m1", "m2"]
        first = answer["messages"][0]
        assert first["headers"]["custom"] == "0" and first["persistent"] is True and first["priority"] == 6
        assert first["bodyEncoding"] == "utf-8" and first["bodySize"] == 2 and not first["bodyTruncated"]
        assert first["messageId"].endswith("-1") and first["redelivered"] is False
        c = net.connected_client()
        c.subscribe("/queue/look")
        assert len(c.messages()) == 5  # nothing was consumed

    def test_browse_reads_store_only_messages_from_disk_without_paging_them_in(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path, {"system_usage": {"memory_limit": "100 kb"}})
        p = net.connected_client()
        for i in range(150):
            p.send("/queue/deep", f"{i:04d}" + BODY, persistent="true")
        queue = net.broker.destinations["/queue/deep"]
        cached, stored = len(queue.pending), len(queue.cursor.store_only)
        assert stored > 0
        answer = ask(net.connected_client(), "Browse", target="/queue/deep", count="1000", **{"body-limit": "4"})
        assert [m["body"] for m in answer["messages"]] == [f"{i:04d}" for i in range(150)]
        assert all(m["bodyTruncated"] and m["bodySize"] == 980 for m in answer["messages"])
        assert (len(queue.pending), len(queue.cursor.store_only)) == (cached, stored)

    def test_a_binary_body_is_base64(self) -> None:
        net = VirtualNetwork()
        net.connected_client().send("/queue/bin", b"\xff\x00\xfe")
        [m] = ask(net.connected_client(), "Browse", target="/queue/bin")["messages"]
        assert m["bodyEncoding"] == "base64" and base64.b64decode(m["body"]) == b"\xff\x00\xfe"

    def test_browse_needs_a_reply_to_and_a_sane_count(self) -> None:
        net = VirtualNetwork()
        fill(net, "/queue/q", 1)
        assert "needs a reply-to header (where the answer goes)" in refusal(
            net.connected_client(), "Browse", target="/queue/q"
        )
        assert "header count must be an integer from 1 to 1000" in refusal(
            net.connected_client(), "Browse", target="/queue/q", count="0", **{"reply-to": "/temp-queue/r"}
        )


def dead_letters(net: VirtualNetwork, address: str, bodies: list[tuple[str, dict[str, str]]]) -> None:
    """Send ``bodies`` (persistent) to ``address`` and NACK them until they are in the DLQ."""
    p = net.connected_client()
    for body, headers in bodies:
        p.send(address, body, persistent="true", **headers)
    c = net.connected_client()
    c.subscribe(address, "s", "client-individual")
    for _ in range(10):
        new = c.messages()
        c.clear()
        if not new:
            break
        for m in new:
            c.nack(m)
    c.disconnect()
    p.disconnect()


class TestMove:
    def test_move_sends_dead_letters_back_to_their_queues(self) -> None:
        net = VirtualNetwork()
        dead_letters(net, "/queue/orders", [("o1", {}), ("o2", {})])
        dead_letters(net, "/queue/invoices", [("i1", {})])
        dlq = net.broker.destinations["/queue/ActiveMQ.DLQ"]
        assert dlq.size() == 3
        answer = ask(net.connected_client(), "Move", target="/queue/ActiveMQ.DLQ")
        assert answer == {
            "operation": "move",
            "from": "/queue/ActiveMQ.DLQ",
            "to": None,
            "moved": 3,
            "movedTo": {"/queue/orders": 2, "/queue/invoices": 1},
            "skipped": {},
            "waiting": 3,
            "selected": 3,
        }
        assert dlq.size() == 0
        c = net.connected_client()
        c.subscribe("/queue/orders", "o")
        msgs = c.messages()
        assert [m.body for m in msgs] == [b"o1", b"o2"]
        assert "redelivered" not in msgs[0].headers and msgs[0].headers["persistent"] == "true"

    def test_move_with_a_selector_and_a_count_to_another_queue(self) -> None:
        net = VirtualNetwork()
        p = net.connected_client()
        for i in range(6):
            p.send("/queue/mixed", f"m{i}", colour="red" if i % 2 else "blue")
        answer = ask(
            net.connected_client(),
            "Move",
            target="/queue/mixed",
            to="/queue/reds",
            selector="colour = 'red'",
            count="2",
        )
        assert answer["moved"] == 2 and answer["movedTo"] == {"/queue/reds": 2}
        c = net.connected_client()
        c.subscribe("/queue/reds", "r")
        c.subscribe("/queue/mixed", "m")
        assert [m.body for m in c.messages() if m.headers["subscription"] == "r"] == [b"m1", b"m3"]
        assert [m.body for m in c.messages() if m.headers["subscription"] == "m"] == [b"m0", b"m2", b"m4", b"m5"]

    def test_a_selector_that_matches_nothing_says_of_how_many(self) -> None:
        """A STOMP ``priority`` header is JMSPriority, as in ActiveMQ: a selector
        on ``priority`` matches nothing, and the answer says it looked at every
        waiting message, so a user can tell "none matched" from "none there"."""
        net = VirtualNetwork()
        p = net.connected_client()
        for i in range(3):
            p.send("/queue/a", f"m{i}", priority="7")
        p.send("/queue/a", "low", priority="1")
        admin = net.connected_client()
        answer = ask(admin, "Move", target="/queue/a", to="/queue/b", selector="priority > 4")
        assert (answer["moved"], answer["selected"], answer["waiting"]) == (0, 0, 4)
        answer = ask(admin, "Move", target="/queue/a", to="/queue/b", selector="JMSPriority > 4", count="100")
        assert (answer["moved"], answer["selected"], answer["waiting"]) == (3, 3, 4)

    def test_move_skips_what_has_nowhere_to_go(self) -> None:
        net = VirtualNetwork()
        p = net.connected_client()
        p.send("/queue/ActiveMQ.DLQ", "plain")
        p.send("/queue/ActiveMQ.DLQ", "to a topic", **{"original-destination": "/topic/t"})
        p.send("/queue/ActiveMQ.DLQ", "to itself", **{"original-destination": "/queue/ActiveMQ.DLQ"})
        answer = ask(net.connected_client(), "Move", target="/queue/ActiveMQ.DLQ")
        assert answer["moved"] == 0 and answer["skipped"] == {
            "no original-destination header": 1,
            "cannot move to /topic/t: not a queue": 1,
            "cannot move to /queue/ActiveMQ.DLQ: it is the source": 1,
        }
        assert net.broker.destinations["/queue/ActiveMQ.DLQ"].size() == 3

    def test_a_persistent_move_of_store_only_messages_survives_a_restart(self, tmp_path: Path) -> None:
        net = persistent_net(tmp_path, {"system_usage": {"memory_limit": "100 kb"}})
        p = net.connected_client()
        for i in range(150):
            p.send("/queue/src", f"{i:04d}" + BODY, persistent="true", n=str(i))
        assert len(net.broker.destinations["/queue/src"].cursor.store_only) > 0
        admin = net.connected_client()
        answer = ask(admin, "Move", target="/queue/src", to="/queue/dst", selector="n >= 100", receipt="r")
        assert answer["moved"] == 50 and admin.frames("RECEIPT")
        net.restart()
        c = net.connected_client()
        c.subscribe("/queue/dst", "d")
        c.subscribe("/queue/src", "s", **{"activemq.prefetchSize": "1000"})
        net.advance(1)
        got = {sub: [int(m.headers["n"]) for m in c.messages() if m.headers["subscription"] == sub] for sub in "ds"}
        assert got["d"] == list(range(100, 150)) and got["s"] == list(range(100))

    def test_move_refuses_a_bad_selector_or_target(self) -> None:
        net = VirtualNetwork()
        fill(net, "/queue/q", 1)
        assert (
            refusal(net.connected_client(), "Move", target="/queue/q", to="/topic/t")
            == "cannot move to /topic/t: not a queue"
        )
        assert refusal(net.connected_client(), "Move", target="/queue/q", selector="a ===").startswith(
            "invalid selector"
        )
        assert net.broker.destinations["/queue/q"].size() == 1


def secure_net() -> VirtualNetwork:
    users = [("alice", "wonderland", ["admins"]), ("bob", "builder", ["producers"]), ("carol", "singer", ["consumers"])]
    return VirtualNetwork(
        parse_config(
            {
                "users": [
                    {"name": n, "password_hash": hash_password(p, iterations=1000), "groups": g} for n, p, g in users
                ],
                "authorization": [
                    {"queue": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
                    {
                        "queue": "orders.>",
                        "read": ["consumers", "admins"],
                        "write": ["producers", "admins"],
                        "admin": ["producers", "admins"],
                    },
                    {"queue": "ActiveMQ.Admin.Browse", "admin": ["admins", "consumers"]},
                ],
            }
        )
    )


class TestWhoMay:
    def login(self, net: VirtualNetwork, user: str, password: str) -> VirtualClient:
        c = net.client(user)
        assert c.connect(login=user, passcode=password).command == "CONNECTED"
        return c

    def test_a_user_without_the_admin_right_gets_an_error_and_nothing_changes(self) -> None:
        net = secure_net()
        bob = self.login(net, "bob", "builder")
        bob.send("/queue/orders.eu", "o1", receipt="r")
        carol = self.login(net, "carol", "singer")
        assert (
            refusal(carol, "Purge", target="/queue/orders.eu", **{"reply-to": "/temp-queue/r"})
            == "User carol is not authorized to purge: queue://ActiveMQ.Admin.Purge (the admin right is needed)"
        )
        # bob may create orders.> (admin there) but not use the admin protocol
        assert (
            refusal(bob, "Delete", target="/queue/orders.eu")
            == "User bob is not authorized to delete: queue://ActiveMQ.Admin.Delete (the admin right is needed)"
        )
        # carol may browse, but only where she holds the admin right
        carol = self.login(net, "carol", "singer")
        assert (
            refusal(carol, "Browse", target="/queue/orders.eu", **{"reply-to": "/temp-queue/r"})
            == "User carol is not authorized to browse: queue://orders.eu (the admin right is needed)"
        )
        assert net.broker.destinations["/queue/orders.eu"].size() == 1

    def test_whoami_says_which_operations_a_user_may_send(self) -> None:
        net = secure_net()
        carol = self.login(net, "carol", "singer")
        assert ask(carol, "Whoami") == {
            "operation": "whoami",
            "connection": carol.sid,
            "user": "carol",
            "groups": ["consumers"],
            "operations": ["Browse"],
        }
        alice = self.login(net, "alice", "wonderland")
        assert ask(alice, "Whoami")["operations"] == ["Purge", "Delete", "Close", "Browse", "Move"]
        assert ask(VirtualNetwork().connected_client(), "Whoami")["user"] == "anonymous"

    def test_an_admin_may(self) -> None:
        net = secure_net()
        self.login(net, "bob", "builder").send("/queue/orders.eu", "o1", receipt="r")
        alice = self.login(net, "alice", "wonderland")
        assert ask(alice, "Browse", target="/queue/orders.eu")["messages"][0]["body"] == "o1"
        assert ask(alice, "Purge", target="/queue/orders.eu")["purged"] == 1

    def test_move_needs_the_admin_right_on_each_target(self) -> None:
        net = VirtualNetwork(
            parse_config(
                {
                    "users": [
                        {"name": "dave", "password_hash": hash_password("x", iterations=1000), "groups": ["ops"]}
                    ],
                    "authorization": [
                        {"queue": ">", "read": ["ops"], "write": ["ops"], "admin": ["ops"]},
                        {"queue": "vault", "read": ["ops"], "write": ["ops"]},
                    ],
                }
            )
        )
        dave = self.login(net, "dave", "x")
        dave.send("/queue/ActiveMQ.DLQ", "a", **{"original-destination": "/queue/vault"})
        dave.send("/queue/ActiveMQ.DLQ", "b", **{"original-destination": "/queue/open"})
        answer = ask(dave, "Move", target="/queue/ActiveMQ.DLQ")
        assert answer["movedTo"] == {"/queue/open": 1}
        assert answer["skipped"] == {
            "User dave is not authorized to move to: queue://vault (the admin right is needed)": 1
        }
        assert (
            refusal(dave, "Move", target="/queue/ActiveMQ.DLQ", to="/queue/vault")
            == "User dave is not authorized to move to: queue://vault (the admin right is needed)"
        )


def test_an_unknown_operation_is_refused() -> None:
    net = VirtualNetwork()
    assert refusal(net.connected_client(), "Shred", target="/queue/q") == (
        "unknown admin operation /queue/ActiveMQ.Admin.Shred: use ActiveMQ.Admin.Purge, ActiveMQ.Admin.Delete, "
        "ActiveMQ.Admin.Close, ActiveMQ.Admin.Browse, ActiveMQ.Admin.Move, ActiveMQ.Admin.Whoami"
    )


def test_an_operation_inside_a_transaction_is_refused() -> None:
    net = VirtualNetwork()
    fill(net, "/queue/q", 1)
    c = net.connected_client()
    c.send_frame("BEGIN", {"transaction": "t"})
    assert (
        refusal(c, "Purge", target="/queue/q", transaction="t")
        == "an admin purge is not transactional: send it without a transaction header"
    )
    assert net.broker.destinations["/queue/q"].size() == 1


@pytest.mark.parametrize("operation", ["Purge", "Delete"])
def test_without_reply_to_a_receipt_says_it_is_done(operation: str) -> None:
    net = VirtualNetwork()
    fill(net, "/queue/q", 2)
    c = net.connected_client()
    c.send(f"/queue/ActiveMQ.Admin.{operation}", "", target="/queue/q", receipt="ok")
    assert c.last().command == "RECEIPT" and c.last().headers["receipt-id"] == "ok"
    queue = net.broker.destinations.get("/queue/q")
    assert queue is None if operation == "Delete" else queue.size() == 0


def test_a_move_the_store_refuses_part_way_keeps_what_moved_and_leaves_the_rest(tmp_path: Path) -> None:
    """A full ring refuses the target's enqueue: the move stops there with an ERROR
    saying how many moved; those are committed, the rest stay in the source,
    and a restart finds the same split."""
    net = persistent_net(tmp_path, {"store": {"layout": "ring", "file_count": 4, "file_size": "64 kb"}})
    p = net.connected_client()
    for i in range(20):
        p.send("/queue/src", BODY, persistent="true", receipt=f"s{i}")
    n = 0
    while not p.frames("ERROR") and n < 1000:  # the target's ring is full
        p.send("/queue/dst", BODY, persistent="true", receipt=f"d{n}")
        n += 1
    assert p.frames("ERROR")[0].headers["message"] == 'Enqueue capacity threshold exceeded on queue "dst".'
    src, dst = net.broker.destinations["/queue/src"], net.broker.destinations["/queue/dst"]
    in_dst = dst.size()
    message = refusal(net.connected_client(), "Move", target="/queue/src", to="/queue/dst")
    assert message.startswith("move from /queue/src stopped after ")
    assert message.endswith(' messages: Enqueue capacity threshold exceeded on queue "dst".')
    moved = int(message.split("stopped after ")[1].split()[0])
    assert (src.size(), dst.size()) == (20 - moved, in_dst + moved)
    net.restart()
    sizes = [net.broker.destinations[a].size() for a in ("/queue/src", "/queue/dst")]
    assert sizes == [20 - moved, in_dst + moved]


class Killed(BaseException):
    """The broker process dies here."""


@pytest.mark.parametrize("layout", ["growing", "ring"])
@pytest.mark.parametrize("dies", ["before its commit", "after its commit"])
def test_a_move_cut_short_by_a_crash_is_all_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, dies: str
) -> None:
    """The process dies as the move commits its journal transaction: the next start
    finds every message in the source (before the commit) or every one in the
    target (after), never some in both or in neither."""
    doc = {"store": {"layout": layout}, "system_usage": {"memory_limit": "100 kb"}}
    net = persistent_net(tmp_path, doc)
    p = net.connected_client()
    for i in range(100):  # cached and store-only
        p.send("/queue/src", f"{i:03d}" + BODY, persistent="true", receipt=f"r{i}")
    store = net.broker.store
    assert store is not None and len(net.broker.destinations["/queue/src"].cursor.store_only) > 0
    real_commit = store.commit

    def commit_and_die(txid: str) -> None:
        if dies == "after its commit":
            real_commit(txid)
        raise Killed

    monkeypatch.setattr(store, "commit", commit_and_die)  # the seam: this store's commit
    with pytest.raises(Killed):
        net.connected_client().send("/queue/ActiveMQ.Admin.Move", "", target="/queue/src", to="/queue/dst")
    for journal in store.journals():  # what was written reaches the OS; nothing is closed
        journal.flush()
    store._unlock()
    after = VirtualNetwork(parse_config(doc), data_dir=tmp_path / "data")
    c = after.connected_client()
    c.subscribe("/queue/src", "s", **{"activemq.prefetchSize": "1000"})
    c.subscribe("/queue/dst", "d", **{"activemq.prefetchSize": "1000"})
    after.advance(1)
    got = {sub: sorted(m.body[:3].decode() for m in c.messages() if m.headers["subscription"] == sub) for sub in "sd"}
    everything = [f"{i:03d}" for i in range(100)]
    assert got == ({"s": everything, "d": []} if dies == "before its commit" else {"s": [], "d": everything})


def test_a_refused_operation_is_logged_as_a_refusal_not_a_protocol_error(caplog: pytest.LogCaptureFixture) -> None:
    """The operator's mistake (no such destination) is answered with an ERROR
    and logged at info as ``refused: ...``; a broken frame stays a warned
    protocol error."""
    net = VirtualNetwork()
    with caplog.at_level(logging.INFO, logger="minibroker"):
        assert refusal(net.connected_client(), "Delete", target="/queue/nope") == (
            "cannot delete /queue/nope: no such destination"
        )
        net.connected_client().send_frame("SEND", {})
    said = [
        (r.levelname, r.getMessage().split("): ", 1)[1])
        for r in caplog.records
        if r.getMessage().startswith("session ") and "): " in r.getMessage()
    ]
    assert said == [
        ("INFO", "refused: cannot delete /queue/nope: no such destination"),
        ("WARNING", "protocol error: SEND frame has no destination header"),
    ]
