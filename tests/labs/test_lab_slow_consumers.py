"""Lab 02: each policy's verdict and cost, and the abort ERROR as stomp.py sees it on the real server."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from broker_support import RunningBroker
from clients.labs import LabRun, RunResult, labs_directory
from minibroker.config import BrokerConfig, load_config
from minibroker.edge import VirtualNetwork
from stomp_py_support import close, connect, wait_for

LAB = labs_directory() / "02-slow-consumer-policies"
TOPIC = "/topic/ticks"
BODY = "x" * 1000


def metrics(results: dict[str, RunResult], name: str) -> dict[str, Any]:
    return results[name].outcome.metrics


def evidence(results: dict[str, RunResult], name: str) -> str:
    return "\n".join(results[name].outcome.evidence)


def test_every_verdict_is_as_promised(results: dict[str, RunResult]) -> None:
    verdicts = {name: r.outcome.verdict for name, r in results.items()}
    assert verdicts == {
        "block": "pathology",
        "spool": "healthy",
        "discard-oldest": "healthy",
        "discard-newest": "healthy",
        "abort-subscription": "healthy",
        "abort-connection": "healthy",
        "stuck-socket": "pathology",
        "stuck-socket-write-timeout": "healthy",
    }
    assert all(r.as_promised for r in results.values())


def test_block_holds_everyone_to_the_slow_pace(results: dict[str, RunResult]) -> None:
    m = metrics(results, "block")
    assert m["producer_rate"] <= 11 and m["fast_rate"] <= 11  # the slow consumer acks 10/s
    assert m["discarded"] == 0 and m["aborted"] == 0 and m["temp_peak_kb"] == 0
    assert m["flow_blocks"] > 100
    assert (
        "Pending message cursor [VMPendingMessageCursor] is full, temp usage (0%) or memory usage (100%)"
        in evidence(results, "block")
    )


def test_spool_costs_disk_and_staleness_not_throughput(results: dict[str, RunResult]) -> None:
    m = metrics(results, "spool")
    assert m["fast_rate"] == m["producer_rate"] == 50.0
    assert m["discarded"] == 0 and m["flow_blocks"] == 0
    assert m["temp_peak_kb"] >= 1024 and m["backlog"] > 1000
    assert m["slow_lag"] > 20
    assert "swap_out of" in evidence(results, "spool")


def test_discard_counts_what_the_slow_consumer_loses(results: dict[str, RunResult]) -> None:
    oldest, newest = metrics(results, "discard-oldest"), metrics(results, "discard-newest")
    for m in (oldest, newest):
        assert m["fast_rate"] == 50.0 and m["flow_blocks"] == 0 and m["backlog"] == 100
        assert m["discarded"] > 1000 and m["discarded"] + m["backlog"] + 10 < m["sent"]
    assert oldest["discarded"] == newest["discarded"]
    assert oldest["slow_lag"] < 3 < newest["slow_lag"]  # oldest-eviction keeps the slow consumer's view fresh
    text = evidence(results, "discard-oldest")
    assert f"the topic counts discarded={oldest['discarded']}" in text and f"discarded {oldest['discarded']}" in text


def test_abort_subscription_sends_an_error_naming_it_and_keeps_the_connection(results: dict[str, RunResult]) -> None:
    m = metrics(results, "abort-subscription")
    assert m["aborted"] == 1 and m["fast_rate"] == 50.0 and m["slow_rate"] == 0.0 and m["backlog"] == 0
    text = evidence(results, "abort-subscription")
    assert "unsubscribe of 'slow' with reason abort" in text
    assert "subscription:slow" in text and "aborted" in text and "its connection is still open" in text


def test_abort_connection_closes_it(results: dict[str, RunResult]) -> None:
    m = metrics(results, "abort-connection")
    assert m["aborted"] == 1 and m["fast_rate"] == 50.0
    text = evidence(results, "abort-connection")
    assert "Consumer was slow too often" in text and "its connection is closed" in text
    assert "subscription:slow" not in text


def test_a_stuck_socket_stops_the_topic_until_the_write_timeout_closes_it(results: dict[str, RunResult]) -> None:
    stuck, cured = metrics(results, "stuck-socket"), metrics(results, "stuck-socket-write-timeout")
    assert stuck["producer_rate"] == stuck["fast_rate"] == 0.0 and stuck["aborted"] == 0
    assert "slowConsumer False" in evidence(results, "stuck-socket")  # the detector cannot see it
    assert cured["fast_rate"] == cured["producer_rate"] == 50.0 and cured["aborted"] == 1
    text = evidence(results, "stuck-socket-write-timeout")
    assert "write_timeout for session" in text and "disconnect with reason write_timeout" in text
    assert "Forced write timeout for: stuck" in text


def test_the_cost_table_has_every_run(results: dict[str, RunResult]) -> None:
    last = results["stuck-socket-write-timeout"].outcome.evidence
    start = last.index("cost table (every run of this lab):")
    rows = [line for line in last[start + 3 :] if line.startswith("| ")]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows] == list(results)
    assert all(row.rstrip(" |").endswith(results[row.split(" | ")[0].lstrip("| ")].spec.expect) for row in rows)


# -- gaps found while building the lab, now fixed in the broker and the framework --------------


def abort_config(memory: int | None = None, **changes: Any) -> BrokerConfig:
    """The lab's abort-subscription configuration, its policy (and memory limit) changed."""
    config = load_config(LAB / "abort-subscription.toml")
    policy = dataclasses.replace(config.destination_policy[0], **changes)
    config = config.replace(destination_policy=(policy,))
    return config.replace(system_usage={"memory_limit": memory}) if memory else config


def slow_past_the_abort(net: VirtualNetwork) -> Any:
    """A subscriber that acknowledges nothing, 50 messages, 6 s: long enough to be aborted."""
    slow = net.connected_client("slow")
    slow.subscribe(TOPIC, "slow", "client-individual", **{"activemq.prefetchSize": "10"})
    p = net.connected_client("p")
    for _ in range(50):
        p.send(TOPIC, BODY)
    net.advance(6)
    return slow


def test_an_ack_after_the_abort_does_not_close_the_connection() -> None:
    slow = slow_past_the_abort(VirtualNetwork(abort_config(), trace=True))
    assert any(f.headers.get("subscription") == "slow" for f in slow.frames("ERROR"))
    slow.ack(slow.messages()[0])  # received before the abort
    assert not slow.closed


def test_abort_connection_is_traced_as_a_slow_consumer_disconnect() -> None:
    net = VirtualNetwork(abort_config(abort_connection=True), trace=True)
    slow = slow_past_the_abort(net)
    assert slow.closed
    reasons = [e["reason"] for e in net.trace.events("disconnect") if e["session"] == slow.tag]
    assert reasons == ["slow_consumer"]


def test_a_held_producer_resumes_without_the_aborted_subscription() -> None:
    net = VirtualNetwork(abort_config(), trace=True)
    slow = net.connected_client("slow")
    slow.subscribe(TOPIC, "slow", "client-individual", **{"activemq.prefetchSize": "10"})
    fast = net.connected_client("fast")
    fast.subscribe(TOPIC, "fast")
    p = net.connected_client("p")
    for i in range(400):  # memory (512 KB) fills before the abort: the producer is held at 'slow'
        p.send(TOPIC, BODY, receipt=f"r{i}")
    assert len(p.frames("RECEIPT")) < 400
    net.advance(6)  # aborted; the held producer goes on
    assert len(p.frames("RECEIPT")) == len(fast.messages()) == 400
    assert len(slow.messages()) == 10  # its prefetch, nothing after the abort
    assert net.broker.memory.usage == 0  # nothing is held for anyone


def test_a_lab_run_collects_the_broker_log(tmp_path: Path) -> None:
    from clients.labs.model import Lab, RunSpec

    config = tmp_path / "c.toml"
    config.write_text("")
    lab = Lab(tmp_path, "log", "t", "s", (RunSpec("r", config, "healthy", ""),), tmp_path / "scenario.py")
    run = LabRun(lab, lab.runs[0], tmp_path)
    with run._log:
        net = run.network()
        c = net.connected_client("c")
        c.send_frame("SEND", {})  # a protocol error: the broker logs it
    assert any("SEND frame has no destination header" in line for line in run.broker_log())
    assert run.broker_log("no destination") and not run.broker_log("nothing like this")


# -- stomp.py against the real server -------------------------------------------------------------


def test_stomp_py_slow_subscriber_gets_the_abort_error_while_a_fast_one_keeps_receiving(tmp_path: Path) -> None:
    # The lab's abort-subscription.toml, with shorter durations for a test (slow for 1 s, checked every
    # 0.2 s) and memory enough that the producer is never held before the abort (see the resume test above).
    config = abort_config(memory=16 * 1024 * 1024, max_slow_duration=1000, abort_slow_consumer_check_period=200)
    rb = RunningBroker(config, str(tmp_path / "data")).start()
    conns: list[Any] = []
    try:
        slow, s = connect(rb)
        fast, f = connect(rb)
        producer, p = connect(rb)
        conns += [slow, fast, producer]
        slow.subscribe(
            TOPIC, id="slow", ack="client-individual", headers={"activemq.prefetchSize": "10", "receipt": "sub"}
        )
        fast.subscribe(TOPIC, id="fast", ack="auto", headers={"receipt": "sub"})
        assert wait_for(lambda: "sub" in s.receipts and "sub" in f.receipts)
        sent = 0
        while not s.errors and sent < 5000:  # the slow subscriber acknowledges nothing
            for _ in range(10):
                producer.send(TOPIC, BODY)
            sent += 10
            time.sleep(0.02)
        assert wait_for(lambda: bool(s.errors))
        error = s.errors[0]
        assert error.headers["subscription"] == "slow"
        assert "slow too often" in error.headers["message"] and "aborted" in error.headers["message"]
        assert slow.is_connected() and not s.disconnected.is_set()  # only the subscription went
        took_before = s.messages.qsize()
        for i in range(100):  # the fast subscriber goes on, the producer is not held
            producer.send(TOPIC, BODY, headers={"receipt": f"after-{i}"} if i == 99 else {})
        assert wait_for(lambda: "after-99" in p.receipts)
        total = sent + 100
        assert len(f.take(total)) == total
        assert f.nothing_more(0.2)
        assert s.messages.qsize() == took_before == 10  # its prefetch; nothing after the abort
        stats = rb.call(lambda: [(sub.id, len(sub.pending)) for sub in rb.server.broker.destinations[TOPIC].subs])
        assert stats == [("fast", 0)]
    finally:
        for conn in conns:
            close(conn)
        rb.stop()


def test_rates_a_busy_machine_set_are_no_verdict(tmp_path: Path) -> None:
    """Live, the fast consumers under twice the slow one's pace mean "held back" only if flow
    control held the producer. A spool run whose producer a loaded machine kept at 34 msg/s,
    never blocked, is no pathology: the run says the machine was too busy for a fair run. A
    producer held by flow control since before the window, to the end (the stuck socket), is."""
    from clients.labs import load_lab
    from clients.labs.runner import RunResult, _print_result

    lab = load_lab(LAB)
    scenario = lab.scenario()
    pace = scenario.Pace(200, 40, 10.0, 5.0, 80, 8000)

    def judged(name: str, flow: list[dict[str, Any]]) -> tuple[Any, list[str]]:
        spec = next(s for s in lab.runs if s.name == name)
        run = LabRun(lab, spec, tmp_path / name)
        events = [{"event": e, "ts": ts, "session": "p", "usage": "memory", "pct": 100} for e, ts in flow]
        seen = scenario.Seen(
            pace, 34.0, 34.0, 33.0, 7.0, 340, False, [], 0, 9216, 14, 1068, events, "s", "p", [], None, None, 2048
        )
        outcome = scenario.verdict(run, seen, name.startswith("stuck"))
        lines: list[str] = []
        _print_result(RunResult(spec, outcome), lines.append)
        return outcome, lines

    spool, lines = judged("spool", [])
    assert spool.unfair and "flow control never held the producer from t=5 s" in spool.unfair
    assert RunResult(lab.runs[1], spool).too_busy
    assert any(
        line.startswith("    the machine was too busy for a fair run: the fast consumers got 34.0") for line in lines
    )
    stuck, _ = judged("stuck-socket", [("flow_block", 3.2)])
    assert stuck.pathology and not stuck.unfair
    block, _ = judged("block", [("flow_block", 6.0), ("flow_unblock", 6.1)])
    assert block.pathology and not block.unfair
