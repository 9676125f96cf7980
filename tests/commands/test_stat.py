"""Statistics over STOMP: the plugin destinations and ``minibroker stat``."""

from __future__ import annotations

import json
import re

from clients.cli import main as cli
from stomp_py_support import close, connect


def test_statistics_plugin_answers_any_stomp_client(broker) -> None:
    conn, listener = connect(broker)
    try:
        for i in range(3):
            conn.send("/queue/stats.a", f"m{i}")
        conn.subscribe("/temp-queue/replies", id="r")
        conn.send("/queue/ActiveMQ.Statistics.Destination.stats.>", "", headers={"reply-to": "/temp-queue/replies"})
        [reply] = listener.take(1)
        assert reply.headers["content-type"] == "application/json"
        assert reply.headers["statistics-total"] == "1"
        data = json.loads(reply.body)
        assert data["destinationName"] == "/queue/stats.a"
        assert data["size"] == 3 and data["enqueueCount"] == 3 and data["consumerCount"] == 0
        conn.send("/queue/ActiveMQ.Statistics.Broker", "", headers={"reply-to": "/temp-queue/replies"})
        broker_stats = json.loads(listener.take(1)[0].body)
        assert broker_stats["memoryPercentUsage"] == 0 and broker_stats["memoryUsage"] > 3 * 1024
        assert {"storePercentUsage", "tempPercentUsage", "indexBytes", "connectionCount", "diagnosis"} <= set(
            broker_stats
        )
    finally:
        close(conn)


def test_a_statistics_request_without_reply_to_is_an_error(broker) -> None:
    conn, listener = connect(broker)
    conn.send("/queue/ActiveMQ.Statistics.Broker", "")
    assert listener.disconnected.wait(10)
    assert "needs a reply-to header" in listener.errors[0].headers["message"]


def test_stat_command_prints_the_tables(broker, capsys) -> None:
    conn, listener = connect(broker)
    try:
        for i in range(2):
            conn.send("/queue/orders", "x", headers={"receipt": f"r{i}"})
        conn.subscribe("/topic/news", id="n")
        conn.subscribe("/queue/orders", id="o", ack="client", headers={"activemq.prefetchSize": "1"})
        listener.take(1)  # one delivered, not acknowledged
        assert cli(["stat", "--port", str(broker.port), "--connections", "--subscriptions"]) == 0
        out = capsys.readouterr().out
        first = out.splitlines()[0]
        assert re.match(
            r"broker localhost at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC: memory 0% "
            r"\(\d+(\.\d)? KiB of 64 MiB\)",
            first,
        ), first
        assert "in memory (in no usage), 0 bytes on disk" in first
        assert ", 2 destinations, " in out
        header = next(line for line in out.splitlines() if line.startswith("destination ")).split()
        orders = next(line for line in out.splitlines() if line.startswith("/queue/orders")).split()
        row = dict(zip(header, orders, strict=True))
        assert (row["size"], row["ready"], row["unacked"], row["enqueued"], row["consumers"]) == (
            "2",
            "1",
            "1",
            "2",
            "1",
        )
        assert re.fullmatch(r"\d+\.\d", row["in/s"]) and re.fullmatch(r"\d+(\.\d)?(B|KiB)", row["memory"])
        mine = next(line for line in out.splitlines() if line.split()[:1] and "anonymous" in line.split())
        assert "tcp" in mine.split()
        assert "/topic/news" in out and "minibroker-stat" not in out.split("connection")[0]
        assert cli(["stat", "--port", str(broker.port), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        # stat's own reply queue is no destination: the count and the list agree
        assert {d["destinationName"] for d in data["destinations"]} == {"/queue/orders", "/topic/news"}
        assert data["broker"]["destinationCount"] == 2
    finally:
        close(conn)


def test_stat_against_no_broker_is_a_clear_error(capsys) -> None:
    assert cli(["stat", "--port", "1"]) == 1
    err = capsys.readouterr().err
    assert "cannot connect to 127.0.0.1:1" in err and "Traceback" not in err


def test_stat_watch_refreshes_until_interrupted(broker) -> None:
    """``stat --watch S`` prints the tables again every S seconds, each from a fresh
    request: a message sent between two refreshes shows up in the next one."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "clients.cli", "stat", "--port", str(broker.port), "--watch", "0.2", "-d", "watch.q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    conn, _ = connect(broker)
    try:
        rows: list[list[str]] = []
        refreshes = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("/queue/watch.q"):
                rows.append(line.split())
            elif line.startswith("broker "):
                refreshes += 1
                if len(rows) < 2:
                    conn.send("/queue/watch.q", "x", headers={"receipt": f"r{refreshes}"})
            if (len(rows) >= 2 and rows[-1][1] != rows[0][1]) or refreshes > 50:
                break
        assert len(rows) >= 2 and int(rows[-1][1]) > int(rows[0][1])  # the queue's size, read again
    finally:
        close(conn)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err


def test_the_real_server_samples_rates_on_its_clock(broker) -> None:
    """Rates need the broker's clock to move: a queue that keeps receiving shows
    a positive enqueue rate once a sample has been taken between its sends."""
    import time

    conn, listener = connect(broker)
    try:
        conn.subscribe("/temp-queue/replies", id="r")
        deadline = time.monotonic() + 15
        rate, sent = 0.0, 0
        while rate == 0.0 and time.monotonic() < deadline:
            conn.send("/queue/rated", "x", headers={"receipt": f"s{sent}"})
            sent += 1
            conn.send("/queue/ActiveMQ.Statistics.Destination.rated", "", headers={"reply-to": "/temp-queue/replies"})
            data = json.loads(listener.take(1)[0].body)
            rate = data["enqueueRate"]
            assert data["timestamp"] > 1_600_000_000_000 and data["readyCount"] == sent
        assert rate > 0
    finally:
        close(conn)


def test_stat_counts_in_words_a_user_reads(broker, capsys) -> None:
    """One connection besides stat's own: ``1 connection``, not ``1 connections``."""
    conn, _ = connect(broker)
    try:
        assert cli(["stat", "--port", str(broker.port)]) == 0
    finally:
        close(conn)
    assert "  1 connection, 0 destinations, 0 blocked sends; " in capsys.readouterr().out


def test_stat_neither_counts_its_own_connection_nor_lists_its_reply_subscription(broker, capsys) -> None:
    assert cli(["stat", "--port", str(broker.port), "--connections", "--subscriptions"]) == 0
    out = capsys.readouterr().out
    assert "  0 connections, 0 destinations, " in out
    assert "(no connections)" in out and "(no subscriptions)" in out
