"""The web console in a real headless Chromium: the page loads with no console errors,
shows a queue's depth changing as messages are sent, purges it, sends a dead letter
queue's messages back and closes a connection, shows the starving consumers'
diagnosis as a banner with its cure, and hides the admin actions from a user without
the admin right, whose operation sent anyway is refused with an ERROR; says it is
loading until the first statistics, asks for a login when the broker refuses its
anonymous CONNECT, and waits for Whoami before saying what the user may not do.
Each test saves screenshots of the pages it visited in its temporary directory."""

from __future__ import annotations

import json
import queue
from pathlib import Path
from typing import Any

import pytest
import stomp

from broker_support import RunningBroker
from browser_support import console_messages, start_chromium, wait_for
from clients.labs import labs_directory
from minibroker.config import ANY_PORT, AuthorizationEntry, User, load_config
from minibroker.connection import hash_password
from minibroker.edge.console.vendor import check as vendored_problems

WAIT = 10.0


@pytest.fixture
def browser(tmp_path: Path) -> Any:
    problems = vendored_problems()
    if problems:
        pytest.fail("the console's libraries are not vendored: " + "; ".join(problems))
    driver = start_chromium(tmp_path / "profile")
    yield driver
    driver.quit()


def open_console(driver: Any, broker: RunningBroker) -> None:
    driver.get(f"http://127.0.0.1:{broker.server.console_port}/")
    wait_for(driver, "return window.minibrokerConsole && window.minibrokerConsole.broker", "the broker's statistics")
    wait_for(driver, "return window.minibrokerConsole.whoamiDone", "what this user may do")


def click(driver: Any, selector: str) -> None:
    """Click what ``selector`` finds, found and clicked in one step: the page redraws its
    tables every second, so an element found in one call may be gone by the next."""
    assert driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;", selector
    ), f"nothing on the page matches {selector}"


def errors_in(console: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in console if m["level"] == "SEVERE"]


class Client:
    """A stomp.py connection that waits for its receipts."""

    def __init__(self, broker: RunningBroker, **connect: Any) -> None:
        self.receipts: queue.Queue[str] = queue.Queue()
        self.conn = stomp.Connection12([broker.address])
        listener = stomp.ConnectionListener()
        listener.on_receipt = lambda frame: self.receipts.put(frame.headers["receipt-id"])  # type: ignore[method-assign]
        self.conn.set_listener("receipts", listener)
        self.conn.connect(wait=True, **connect)

    def send(self, destination: str, count: int, body: str = "hello", **headers: str) -> None:
        for n in range(count):
            self.conn.send(destination, f"{body} {n}", headers=headers)
        self.conn.send(destination, "last", headers={**headers, "receipt": destination})
        assert self.receipts.get(timeout=WAIT) == destination

    def close(self) -> None:
        self.conn.disconnect()


def test_console_shows_and_purges_a_queue(browser: Any, broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT})
    open_console(browser, broker)
    client = Client(broker)
    try:
        client.send("/queue/console.q", 6)  # 7 with the last
        wait_for(browser, _cell_is("/queue/console.q", "size", "7"), "the queue's depth of 7")
        client.send("/queue/a.small", 1)  # 2: first by name, second by size
        wait_for(browser, _cell_is("/queue/a.small", "size", "2"), "the second queue")
        order = "return [...document.querySelectorAll('#destinations tbody tr')].map(r => r.dataset.destination);"
        assert browser.execute_script(order) == ["/queue/a.small", "/queue/console.q"]
        click(browser, '#destinations th[data-key="size"]')  # largest first
        assert browser.execute_script(order) == ["/queue/console.q", "/queue/a.small"]
        browser.save_screenshot(str(tmp_path / "overview.png"))
        # The destination's page: its figures and first messages.
        browser.get(f"http://127.0.0.1:{broker.server.console_port}/#/destination/%2Fqueue%2Fconsole.q")
        wait_for(browser, "return document.querySelectorAll('#messages .message').length === 7", "the first messages")
        browser.save_screenshot(str(tmp_path / "destination.png"))
        # Purge from the overview's table.
        browser.get(f"http://127.0.0.1:{broker.server.console_port}/#/")
        wait_for(browser, _cell_is("/queue/console.q", "size", "7"), "the queue again")
        browser.execute_script("window.confirm = () => true;")
        click(browser, '#destinations tr[data-destination="/queue/console.q"] button[data-action="purge"]')
        wait_for(browser, _cell_is("/queue/console.q", "size", "0"), "the purged queue's depth of 0")
        assert broker.call(lambda: broker.server.broker.destinations["/queue/console.q"].size()) == 0
        # The connections: the test's client over TCP, not this page's own (the asking connection).
        browser.get(f"http://127.0.0.1:{broker.server.console_port}/#/connections")
        protocols = wait_for(
            browser,
            "const rows = [...document.querySelectorAll('#connections tbody tr')];"
            "return rows.length >= 1 && rows.map(r => r.children[4].textContent).sort();",
            "the client's connection",
        )
        assert protocols == ["TCP"]
        browser.save_screenshot(str(tmp_path / "connections.png"))
        console = console_messages(browser)
    finally:
        client.close()
    assert not errors_in(console), console


def _cell_is(destination: str, key: str, text: str) -> str:
    """JavaScript: is the destinations table's cell showing ``text``?"""
    return (
        f"const row = document.querySelector('#destinations tr[data-destination=\"{destination}\"]');"
        f"const cell = row && row.querySelector('td[data-key=\"{key}\"]');"
        f"return !!cell && cell.textContent === {json.dumps(text)};"
    )


def test_console_shows_the_starving_consumers_diagnosis(browser: Any, tmp_path: Path) -> None:
    lab = labs_directory() / "00-starving-consumers"
    config = load_config(lab / "legacy.toml").replace(console={"port": ANY_PORT})
    data = str(tmp_path / "data")
    rb = RunningBroker(config, data).start()
    try:
        client = Client(rb)
        client.send("/queue/A", 49, "a", persistent="true")
        client.close()
    finally:
        rb.stop()
    rb = RunningBroker(config, data).start()  # the restart: A's messages stay in the store
    try:
        producer, consumer = Client(rb), Client(rb)
        producer.send("/queue/B.1", 1799, "x" * 1000, persistent="true")
        consumer.conn.subscribe("/queue/A", id="a", ack="auto", headers={"receipt": "a"})
        assert consumer.receipts.get(timeout=WAIT) == "a"
        open_console(browser, rb)
        text = wait_for(
            browser,
            "const b = document.querySelector('.banner[data-pathology=\"starving-consumers\"]');"
            "return b && b.textContent;",
            "the starving consumers' banner",
        )
        browser.save_screenshot(str(tmp_path / "starving.png"))
        assert "/queue/A" in text and "Cure:" in text and "/queue/B.1" in text
        producer.close()
        consumer.close()
    finally:
        rb.stop()


def test_a_user_without_the_admin_right_sees_no_action(browser: Any, broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    users = (
        User("alice", hash_password("wonderland", iterations=1000), ("admins",)),
        User("bob", hash_password("builder", iterations=1000), ("users",)),
    )
    authorization = (
        AuthorizationEntry(queue="ActiveMQ.Admin.>", write=("admins", "users"), admin=("admins",)),
        AuthorizationEntry(queue=">", read=("admins", "users"), write=("admins", "users"), admin=("admins",)),
        AuthorizationEntry(topic=">", read=("admins", "users"), write=("admins", "users"), admin=("admins",)),
    )
    broker = broker_factory(console={"port": ANY_PORT}, users=users, authorization=authorization)
    client = Client(broker, username="alice", passcode="wonderland")
    client.send("/queue/kept", 2)
    client.close()
    browser.get(f"http://127.0.0.1:{broker.server.console_port}/")
    wait_for(browser, "return document.getElementById('status').textContent.includes('log in')", "the login request")
    browser.find_element("css selector", "#login input[name=login]").send_keys("bob")
    browser.find_element("css selector", "#login input[name=passcode]").send_keys("builder")
    browser.find_element("css selector", "#login button").click()
    wait_for(browser, _cell_is("/queue/kept", "size", "3"), "the queue, for bob")
    wait_for(browser, "return window.minibrokerConsole.whoamiDone", "bob's rights")
    assert browser.execute_script("return document.querySelectorAll('button[data-action]').length") == 0
    browser.get(f"http://127.0.0.1:{broker.server.console_port}/#/connections")
    wait_for(browser, "return !document.getElementById('page-connections').hidden", "the connections page")
    assert browser.execute_script("return document.querySelectorAll('button[data-action]').length") == 0
    browser.save_screenshot(str(tmp_path / "non-admin.png"))
    # The operation sent anyway: the broker refuses it with an ERROR saying why.
    browser.execute_script("window.minibrokerConsole.admin('Purge', {target: '/queue/kept'}).catch(() => {});")
    text = wait_for(
        browser,
        "const n = [...document.querySelectorAll('.notice')].map(e => e.textContent).join(' ');"
        "return n.includes('ERROR') && n;",
        "the refusal",
    )
    assert "bob is not authorized to purge" in text
    assert broker.call(lambda: broker.server.broker.destinations["/queue/kept"].size()) == 3


def test_console_retries_a_dead_letter_queue_and_closes_a_connection(
    browser: Any, broker_factory, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from minibroker.config import PolicyEntry

    broker = broker_factory(
        console={"port": ANY_PORT}, destination_policy=(PolicyEntry(queue=">", dead_letter_on_nack=True),)
    )
    errors: queue.Queue[str] = queue.Queue()
    messages: queue.Queue[Any] = queue.Queue()
    consumer = stomp.Connection12([broker.address])
    listener = stomp.ConnectionListener()
    listener.on_message = messages.put  # type: ignore[method-assign,assignment]
    listener.on_error = lambda frame: errors.put(frame.headers.get("message", ""))  # type: ignore[method-assign]
    consumer.set_listener("c", listener)
    consumer.connect(wait=True, headers={"client-id": "worker"})
    producer = Client(broker)
    try:
        consumer.subscribe("/queue/work", id="w", ack="client-individual")
        producer.send("/queue/work", 1, persistent="true")  # two messages (a non-persistent one would be dropped)
        for _ in range(2):  # each NACKed: to the dead letter queue
            frame = messages.get(timeout=WAIT)
            consumer.nack(frame.headers["ack"])
        consumer.unsubscribe("w")
        open_console(browser, broker)
        wait_for(browser, _cell_is("/queue/ActiveMQ.DLQ", "size", "2"), "the dead letter queue's two messages")
        browser.execute_script("window.confirm = () => true;")
        click(browser, '#destinations tr[data-destination="/queue/ActiveMQ.DLQ"] button[data-action="retry"]')
        wait_for(browser, _cell_is("/queue/work", "size", "2"), "the messages back on their queue")
        wait_for(browser, _cell_is("/queue/ActiveMQ.DLQ", "size", "0"), "the dead letter queue empty")
        browser.save_screenshot(str(tmp_path / "retried.png"))
        # Close the consumer's connection from the connections page.
        browser.get(f"http://127.0.0.1:{broker.server.console_port}/#/connections")
        wait_for(browser, "return document.querySelectorAll('#connections tbody tr').length === 2", "two connections")
        consumer_id = broker.call(lambda: broker.server.broker.client_ids["worker"].id)
        click(browser, f'#connections tr[data-connection="{consumer_id}"] button[data-action="close"]')
        assert "closed by an administrator" in errors.get(timeout=WAIT)
        wait_for(
            browser, "return document.querySelectorAll('#connections tbody tr').length === 1", "the closed one gone"
        )
        browser.save_screenshot(str(tmp_path / "closed.png"))
    finally:
        producer.close()
        if consumer.is_connected():
            consumer.disconnect()


#: A WebSocket that holds back the frames the page receives while ``window.holdIf(text)``
#: says so, until ``window.releaseFrames()``: the broker's answers made slow, in the page.
_HOLDING_WEBSOCKET = """
const RealWebSocket = window.WebSocket;
const held = [];
window.holdIf = () => true;
window.releaseFrames = () => { window.holdIf = () => false; held.splice(0).forEach((deliver) => deliver()); };
window.WebSocket = class extends RealWebSocket {
  set onmessage(handler) {
    super.onmessage = (event) => {
      const text = typeof event.data === 'string' ? event.data : new TextDecoder().decode(event.data);
      if (window.holdIf(text)) held.push(() => handler.call(this, event)); else handler.call(this, event);
    };
  }
  get onmessage() { return super.onmessage; }
};
"""


def hold_frames(driver: Any, hold_if: str) -> None:
    """From the next page load on, hold the frames for which the JavaScript ``hold_if``
    (a function of the frame's text) is true, until ``window.releaseFrames()``."""
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": _HOLDING_WEBSOCKET + f"window.holdIf = {hold_if};"}
    )


def _shown(section: str) -> str:
    """JavaScript: the page's ``section``'s text if it is the one shown, else false."""
    return (
        f"const s = document.getElementById('page-{section}');"
        "return !!s && !s.hidden && s.offsetParent !== null && (s.textContent || true);"
    )


def test_the_console_says_it_is_loading_until_the_first_statistics(
    browser: Any, broker_factory, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT})
    hold_frames(browser, "() => true")
    browser.get(f"http://127.0.0.1:{broker.server.console_port}/")
    text = wait_for(browser, _shown("loading"), "the loading state")
    assert "Connecting to the broker" in text
    assert browser.execute_script("return document.getElementById('page-overview').hidden")
    browser.save_screenshot(str(tmp_path / "loading.png"))
    browser.execute_script("window.releaseFrames();")
    wait_for(browser, _shown("overview"), "the overview once the statistics came")
    assert browser.execute_script("return document.getElementById('page-loading').hidden")
    assert browser.execute_script("return document.querySelector('[data-figure=\"in / s\"] .v').textContent") == "0.0"
    browser.save_screenshot(str(tmp_path / "loaded.png"))


def test_the_destination_page_waits_for_what_the_user_may_do(browser: Any, broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """On an open broker anyone may browse: until Whoami answers, the page does not say otherwise."""
    broker = broker_factory(console={"port": ANY_PORT})
    client = Client(broker)
    client.send("/queue/orders", 2)
    client.close()
    hold_frames(browser, '(text) => text.includes(\'"operation": "whoami"\')')
    browser.get(f"http://127.0.0.1:{broker.server.console_port}/#/destination/%2Fqueue%2Forders")
    wait_for(
        browser,
        "return document.querySelector('[data-figure=\"size\"] .v')?.textContent === '3'",
        "the queue's figures",
    )
    text = browser.execute_script("return document.getElementById('messages').textContent")
    browser.save_screenshot(str(tmp_path / "destination-before-whoami.png"))
    assert "admin right" not in text and "Loading" in text
    browser.execute_script("window.releaseFrames();")
    wait_for(browser, "return document.querySelectorAll('#messages .message').length === 3", "the first messages")
    assert "admin right" not in browser.execute_script("return document.getElementById('messages').textContent")
    browser.save_screenshot(str(tmp_path / "destination-after-whoami.png"))


def test_the_console_asks_for_a_login_when_the_broker_needs_one(browser: Any, broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    users = (User("alice", hash_password("wonderland", iterations=1000), ("admins",)),)
    broker = broker_factory(console={"port": ANY_PORT}, users=users)
    client = Client(broker, username="alice", passcode="wonderland")
    client.send("/queue/kept", 1)
    client.close()
    base = f"http://127.0.0.1:{broker.server.console_port}/"
    for attempt in range(4):  # a few visits before logging in: each is told at once it needs a login
        browser.get(base + f"?visit={attempt}")
        text = wait_for(browser, _shown("login"), "the login form", timeout=WAIT)
    assert "needs a user name and password" in text
    assert browser.execute_script("return document.getElementById('page-loading').hidden")
    browser.save_screenshot(str(tmp_path / "login.png"))
    browser.find_element("css selector", "#login input[name=login]").send_keys("alice")
    browser.find_element("css selector", "#login input[name=passcode]").send_keys("wrong")
    browser.find_element("css selector", "#login button").click()
    text = wait_for(
        browser,
        "const t = document.getElementById('login-reason').textContent;return t.includes('refused') && t;",
        "the refusal of a wrong password",
    )
    assert "User name [alice] or password is invalid." in text
    browser.save_screenshot(str(tmp_path / "login-refused.png"))
    browser.find_element("css selector", "#login input[name=passcode]").clear()
    browser.find_element("css selector", "#login input[name=passcode]").send_keys("wonderland")
    browser.find_element("css selector", "#login button").click()
    wait_for(browser, _cell_is("/queue/kept", "size", "2"), "the destinations, for alice")
    wait_for(browser, "return window.minibrokerConsole.whoamiDone", "alice's rights")
    assert browser.execute_script("return document.getElementById('page-login').hidden")
    assert "connected as alice" in browser.execute_script("return document.getElementById('status').textContent")
    browser.save_screenshot(str(tmp_path / "logged-in.png"))


def test_the_loading_state_says_what_it_waits_for(browser: Any, broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Connected, the broker's statistics late: the page names the request it waits for and counts the seconds."""
    broker = broker_factory(console={"port": ANY_PORT})
    hold_frames(browser, "(text) => text.includes('\"brokerName\"')")
    browser.get(f"http://127.0.0.1:{broker.server.console_port}/")
    wait_for(browser, _shown("loading"), "the loading state", timeout=WAIT)
    text = wait_for(
        browser,
        "const t = document.getElementById('loading-what').textContent; return /asked \\d+ s ago/.test(t) && t;",
        "the seconds waited",
        timeout=WAIT,
    )
    assert text.startswith("Connected; waiting for the broker's answer to ActiveMQ.Statistics.Broker (asked ")
    browser.save_screenshot(str(tmp_path / "waiting-for-the-broker.png"))
    browser.execute_script("window.releaseFrames();")
    wait_for(browser, _shown("overview"), "the overview once the statistics came")


def test_the_overview_comes_with_the_brokers_figures_before_the_destinations(
    browser: Any, broker_factory, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT})
    client = Client(broker)
    client.send("/queue/orders", 2)
    client.close()
    hold_frames(browser, "(text) => text.includes('\"destinationName\"')")
    browser.get(f"http://127.0.0.1:{broker.server.console_port}/")
    wait_for(browser, _shown("overview"), "the overview, the destinations not yet answered", timeout=WAIT)
    assert "Waiting for the broker's answer to ActiveMQ.Statistics.Destination.>" in browser.execute_script(
        "return document.querySelector('#destinations tbody').textContent"
    )
    assert (
        browser.execute_script("return document.querySelector('[data-figure=\"messages held\"] .v').textContent") == "3"
    )
    browser.save_screenshot(str(tmp_path / "overview-before-the-destinations.png"))
    browser.execute_script("window.releaseFrames();")
    wait_for(browser, _cell_is("/queue/orders", "size", "3"), "the destinations once they came")


def test_the_overview_counts_one_thing_in_the_singular(browser: Any, broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(console={"port": ANY_PORT})
    client = Client(broker)
    client.send("/queue/one", 0)  # and stays connected: the one connection the page counts
    open_console(browser, broker)
    wait_for(browser, _cell_is("/queue/one", "size", "1"), "the queue")
    labels = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#figures .figure')]"
        ".map(f => [f.dataset.figure, f.querySelector('.v').textContent + ' ' + f.querySelector('.k').textContent]))"
    )
    # One client's connection (the page does not count its own), one queue holding one message,
    # nobody consuming.
    assert labels["connections"] == "1 connection"
    assert labels["destinations"] == "1 destination"
    assert labels["messages held"] == "1 message held"
    assert labels["consumers"] == "0 consumers"
    assert labels["blocked producers"] == "0 blocked producers"
    client.close()
