"""Bad input, generated: whatever a client sends, the broker answers it and goes on.

Hypothesis writes a connection's worth of frames from STOMP's commands and the
headers the broker reads (with good values, edge values and garbage), plus raw
bytes. Whatever comes, the core must not raise: it answers with frames (an
ERROR says in its ``message`` header what was wrong; when it closes the
connection, the next frames come on a new one), and a bystander client on the
same broker still sends and receives. The same runs with persistent messages
on a journal. Queue browsers, transactions and temporary destinations are in
the mix, and whenever a connection ends nothing of it may be left behind
(``minibroker.invariants``: no subscription, unacknowledged message,
transaction, temporary destination or flow-control wait; what it held is back
on its queue).
"""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.codec import encode
from minibroker.config import parse_config
from minibroker.frames import Frame
from minibroker.sim import VirtualNetwork

COMMANDS = ["CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT",
            "DISCONNECT", "SEND", "SEND", "SUBSCRIBE", "ACK"]
NUMBERS = st.sampled_from(["0", "1", "2", "10", "-1", "99999999999999999999", "x", "", " 5", "1.5", "\u0663"])
VALUES = {
    "destination": st.sampled_from(["/queue/f", "/topic/f", "/queue/", "/bogus/x", "", "/queue/ActiveMQ.DLQ",
                                    "/queue/f,/topic/g", "/topic/>", "/queue/a b", "/queue/\u00e9", "/queue/f",
                                    "/temp-queue/t", "/temp-topic/t", "/remote-temp-queue/x"]),
    "browser": st.sampled_from(["true", "true", "false", "yes"]),
    "id": st.sampled_from(["0", "1", "s", "", "1-1", "99-1", "0-0"]),
    "ack": st.sampled_from(["auto", "client", "client-individual", "bogus", ""]),
    "receipt": st.sampled_from(["r1", "", "r:2"]),
    "transaction": st.sampled_from(["t1", "t2", ""]),
    "message-id": st.sampled_from(["ID:x-1-1", "nope", ""]),
    "subscription": st.sampled_from(["0", "1", "s", ""]),
    "selector": st.sampled_from(["color = 'red'", "a >", "x IN ('a')", "JMSPriority > 4", "((", ""]),
    "activemq.prefetchSize": NUMBERS,
    "activemq.subscriptionName": st.sampled_from(["d", ""]),
    "activemq.exclusive": st.sampled_from(["true", "false", "maybe"]),
    "persistent": st.sampled_from(["true", "false", "yes"]),
    "priority": NUMBERS,
    "expires": NUMBERS,
    "reply-to": st.sampled_from(["/queue/r", "/temp-queue/x", "nowhere"]),
    "heart-beat": st.sampled_from(["0,0", "10,10", "x", "1,2,3", "-1,5"]),
    "accept-version": st.sampled_from(["1.0", "1.1", "1.2", "1.0,1.1,1.2", "2.0", ""]),
    "host": st.sampled_from(["localhost", ""]),
    "client-id": st.sampled_from(["c", ""]),
}
REQUIRED = {"SEND": ("destination",), "SUBSCRIBE": ("destination", "id"), "UNSUBSCRIBE": ("id",),
            "ACK": ("id", "message-id", "subscription"), "NACK": ("id", "message-id", "subscription"),
            "BEGIN": ("transaction",), "COMMIT": ("transaction",), "ABORT": ("transaction",)}
HEADERS = st.dictionaries(st.sampled_from(sorted(VALUES)), st.just(None), max_size=5).flatmap(
    lambda names: st.fixed_dictionaries({name: VALUES[name] for name in names}))


@st.composite
def chunk(draw: st.DrawFn) -> bytes:
    """One frame (well formed or not) or raw bytes."""
    kind = draw(st.sampled_from(["frame"] * 8 + ["raw", "body-on-bodiless", "browse"]))
    if kind == "raw":
        return draw(st.binary(max_size=40))
    if kind == "browse":  # a queue browser beside whatever else the connection does
        sub_id = draw(st.sampled_from(["b", "0", "1"]))
        return encode(Frame("SUBSCRIBE", {"destination": draw(st.sampled_from(["/queue/f", "/queue/ok", "/temp-queue/t"])),
                                          "id": sub_id, "browser": "true"}), "1.2")
    command = draw(st.sampled_from(COMMANDS))
    headers = draw(HEADERS)
    if draw(st.integers(0, 9)) < 8:  # mostly with the headers the command needs, so that it gets somewhere
        for name in REQUIRED.get(command, ()):
            headers.setdefault(name, draw(VALUES[name]))
    if kind == "body-on-bodiless":
        return command.encode() + b"\n\nbody\x00"
    body = draw(st.binary(max_size=20)) if command == "SEND" else b""
    try:
        return encode(Frame(command, headers, body), draw(st.sampled_from(["1.0", "1.2"])))
    except ValueError:  # not encodable as asked (a raw colon in a 1.0 header ...): send it as it is
        lines = [command] + [f"{k}:{v}" for k, v in headers.items()]
        return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


def _run(config_doc: dict, persistent: bool, connect_version: str, chunks: list[bytes]) -> None:
    data_dir = tempfile.mkdtemp(prefix="minibroker-fuzz-") if persistent else None
    net = VirtualNetwork(parse_config(config_doc), data_dir=data_dir, check_teardown=True)
    try:
        bystander = net.connected_client("bystander")
        bystander.subscribe("/queue/ok", "b", "client-individual")
        fuzzers = []
        for data in chunks:
            if not fuzzers or fuzzers[-1].closed:  # an ERROR closed the last one: the next connects
                fuzzers.append(net.client(f"fuzz{len(fuzzers)}"))
                fuzzers[-1].send_raw(encode(Frame("CONNECT", {"accept-version": connect_version, "host": "h"})))
            fuzzers[-1].write(data)  # any exception from the core fails the test
            net.advance(0.05)
        for fuzz in fuzzers:
            for error in fuzz.frames("ERROR"):
                assert error.headers.get("message"), f"an ERROR without a message header: {error}"
            fuzz.drop()  # every connection ends here, if it has not already
        assert net.teardown is not None
        assert net.teardown.violations == [], net.teardown.violations
        headers = {"persistent": "true"} if persistent else {}
        bystander.send("/queue/ok", "still here", **headers)
        assert bystander.bodies()[-1:] == [b"still here"], bystander.frames()
        bystander.ack(bystander.messages()[-1])
        assert not bystander.frames("ERROR")
        net.stop()
    finally:
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), chunks=st.lists(chunk(), min_size=1, max_size=20))
def test_any_input_is_answered_and_leaves_other_clients_alone(version: str, chunks: list[bytes]) -> None:
    _run({"system_usage": {"memory_limit": "32 kb"}}, False, version, chunks)


@_SETTINGS
@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), chunks=st.lists(chunk(), min_size=1, max_size=20))
def test_any_input_with_a_journal(version: str, chunks: list[bytes]) -> None:
    _run({"system_usage": {"memory_limit": "32 kb"},
          "store": {"fsync": "never", "journal_max_file_length": "64 kb"}}, True, version, chunks)
