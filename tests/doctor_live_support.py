"""``doctor --live`` sampling the real server (or ActiveMQ) while a lab's live workload plays on it (in a thread)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients.activemq import JOLOKIA_CLASSPATH, ActiveMQ, free_port, installed_problem, jolokia_problem
from clients.doctor.live import LiveReport, parse_target, run_live
from clients.doctor.write_xml import write_xml
from clients.labs.against import HEAP
from clients.labs.model import Lab, labs_directory, load_lab
from clients.stomp import StompClient, StompError
from minibroker.config import BrokerConfig
from tests.broker_support import RunningBroker


def lab_and_scenario(directory: str) -> tuple[Lab, Any]:
    """The lab in ``examples/labs/<directory>`` and its scenario module (its workloads)."""
    lab = load_lab(labs_directory() / directory)
    return lab, lab.scenario()


def doctor_while_playing(
    port: int, play: Callable[[], Coroutine[Any, Any, Any]], window: float
) -> tuple[LiveReport, Any]:
    """The doctor's report over ``window`` seconds of the broker on ``port`` while ``play()``
    runs in a thread of its own, and what ``play()`` returned (its failure raised here)."""
    (report,), played = doctors_while_playing([f"stomp://127.0.0.1:{port}"], play, window)
    return report, played


def doctors_while_playing(
    urls: list[str], play: Callable[[], Coroutine[Any, Any, Any]], window: float, timeout: float = 5.0
) -> tuple[tuple[LiveReport, ...], Any]:
    """The doctor's reports over ``window`` seconds of the broker at each of ``urls`` at once
    while ``play()`` runs in a thread of its own, and what ``play()`` returned (its failure
    raised here)."""
    played: list[Any] = []
    failure: list[BaseException] = []

    def workload() -> None:
        try:
            played.append(asyncio.run(play()))
        except BaseException as exc:  # raised by the caller
            failure.append(exc)

    thread = threading.Thread(target=workload, daemon=True)
    thread.start()
    targets = [parse_target(url) for url in urls]

    async def sample_all() -> tuple[LiveReport, ...]:
        return tuple(await asyncio.gather(*(run_live(t, window=window, timeout=timeout) for t in targets)))

    try:
        reports = asyncio.run(sample_all())
    finally:
        thread.join(60)
    assert not thread.is_alive(), "the workload did not end"
    if failure:
        raise failure[0]
    return reports, played[0]


@dataclass(frozen=True)
class ActiveMQUrls:
    """A running ActiveMQ as the doctor reads it: over STOMP (its statistics plugin) and Jolokia."""

    broker: ActiveMQ
    stomp: str
    jolokia: str

    @property
    def port(self) -> int:
        return self.broker.port


@contextlib.contextmanager
def activemq_for(config: BrokerConfig, directory: Path) -> Iterator[ActiveMQUrls]:
    """ActiveMQ started as a lab's ``--against activemq`` run starts it (the ``activemq.xml`` that
    ``write_xml`` writes from ``config``, the labs' JVM options), with Jolokia on a port of its own
    (its MBeans, as ActiveMQ's web console serves them); stopped after. Its first answers are
    slow (a JVM just started): each reader is asked once (both at once) before it is handed over."""
    problem = installed_problem() or jolokia_problem()
    if problem:
        pytest.fail(problem)
    port, jolokia = free_port(), free_port()
    xml = write_xml(config, stomp_port=port, openwire_port=free_port(), jolokia_port=jolokia)
    conf = directory / "activemq.xml"
    conf.write_text(xml.text)
    broker = ActiveMQ(directory, conf=conf, heap=HEAP, port=port, classpath=JOLOKIA_CLASSPATH, quick_stop=True)
    broker.start()
    try:
        urls = ActiveMQUrls(broker, f"stomp://127.0.0.1:{port}", f"http://127.0.0.1:{jolokia}/")

        async def ask_each_once() -> None:
            await asyncio.gather(
                *(run_live(parse_target(url), window=0, timeout=30) for url in (urls.stomp, urls.jolokia))
            )

        asyncio.run(ask_each_once())
        yield urls
    finally:
        broker.stop()


def doctor_during_run(
    lab: Any,
    run: str,
    play: Callable[[RunningBroker], Coroutine[Any, Any, Any]],
    window: float,
    adapt: Callable[[BrokerConfig], BrokerConfig] = lambda config: config,
) -> tuple[LiveReport, Any]:
    """``doctor_while_playing`` on the real server started with ``lab``'s ``run``'s configuration
    (``adapt`` ed, as a lab's live run adapts it), stopped after; ``play`` is given the server."""
    spec = next(r for r in lab.runs if r.name == run)
    broker = RunningBroker(adapt(spec.config())).start()
    try:
        return doctor_while_playing(broker.port, lambda: play(broker), window)
    finally:
        broker.stop()


# ---------------------------------------------------------------- the journal labs' workloads
# Labs 04 and 06 run on the virtual clock only; these are their workloads on the real server,
# with their numbers (the labs' scenario modules), for the doctor to watch.


async def _send(client: StompClient, destination: str, body: str, timeout: float, **headers: str) -> str | None:
    """A persistent SEND that waits for its RECEIPT: None when receipted, else why not
    (the ERROR's message, or ``held`` when no answer came in ``timeout`` seconds)."""
    try:
        await client.send(destination, body, {"persistent": "true", **headers}, receipt=True, timeout=timeout)
    except StompError as refused:
        return refused.message
    except TimeoutError:
        return "held"
    return None


async def fill_the_ring(
    port: int, current_file: Callable[[], int], leave_behind: bool, seconds: float, lab: Any
) -> dict[str, Any]:
    """Lab 04's ``selector`` workload (``leave_behind``) or its ``all-consumed`` control, for
    ``seconds``: rounds of one ``kind: audit`` message, then batches of orders until the ring
    moves to its next file; the only consumer's selector never takes the audit messages
    unless none is left behind. A refused producer tries again every half second.
    ``current_file()`` is the queue's ring's current file (read from the broker)."""
    deadline = time.monotonic() + seconds
    producer = await StompClient.connect("127.0.0.1", port)
    consumer = await StompClient.connect("127.0.0.1", port)
    await consumer.subscribe(lab.QUEUE, selector="kind = 'order'" if leave_behind else None, on_message=lambda m: None)
    refusal: str | None = None
    rounds = sent = 0
    try:
        while refusal is None and rounds < 16 and time.monotonic() < deadline:
            refusal = await _send(producer, lab.QUEUE, f"pin-{rounds}".ljust(len(lab.BODY), "."), 5, kind="audit")
            rounds += 1
            start = current_file()
            while refusal is None and current_file() == start and time.monotonic() < deadline:
                for _ in range(lab.BATCH - 1):
                    await producer.send(lab.QUEUE, lab.BODY, {"persistent": "true", "kind": "order"})
                refusal = await _send(producer, lab.QUEUE, lab.BODY, 5, kind="order")
                sent += lab.BATCH
        while time.monotonic() < deadline - 0.5:
            await asyncio.sleep(0.5)
            if refusal is not None:
                refusal = await _send(producer, lab.QUEUE, "pin-again".ljust(len(lab.BODY), "."), 5, kind="audit")
    finally:
        producer.close()
        consumer.close()
    return {"refusal": refusal, "rounds": rounds, "sent": sent}


async def keep_the_journal_alive(port: int, seconds: float, lab: Any) -> dict[str, Any]:
    """Lab 06's ``offline-durable`` workload for ``seconds``: a shop sends persistent orders,
    each waiting for its RECEIPT, at most one every ``lab.PERIOD`` s; the fulfilment service
    acknowledges each ``lab.WORK`` s after it came (each journal file holds acks of the one
    before); a durable subscriber to the events topic has gone away, and one persistent
    event is published every ``lab.EVENT_EVERY`` s: what keeps the journal alive."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + seconds
    came: collections.deque[tuple[float, Any]] = collections.deque()
    fulfilment = await StompClient.connect("127.0.0.1", port)
    await fulfilment.subscribe(lab.ORDERS, ack="client-individual", on_message=lambda m: came.append((loop.time(), m)))
    reporting = await StompClient.connect("127.0.0.1", port, client_id="reporting")
    await reporting.subscribe(lab.EVENTS, ack="client-individual", headers={"activemq.subscriptionName": "daily"})
    await reporting.disconnect()
    events = await StompClient.connect("127.0.0.1", port)

    async def publish() -> None:  # held too once the store is full
        while loop.time() < deadline:
            await _send(events, lab.EVENTS, "event", max(deadline - loop.time(), 0.01))
            await asyncio.sleep(lab.EVENT_EVERY)

    async def fulfil() -> None:
        while loop.time() < deadline:
            while came and loop.time() - came[0][0] >= lab.WORK:
                await fulfilment.ack(came.popleft()[1])
            await asyncio.sleep(lab.PERIOD)

    helpers = [asyncio.ensure_future(fulfil()), asyncio.ensure_future(publish())]
    shop = await StompClient.connect("127.0.0.1", port)
    receipted, last_receipt, held = 0, start, False
    try:
        while not held and loop.time() < deadline:
            held = await _send(shop, lab.ORDERS, lab.BODY, max(deadline - loop.time(), 0.01)) is not None
            if not held:
                receipted, last_receipt = receipted + 1, loop.time()
                await asyncio.sleep(max(start + receipted * lab.PERIOD - loop.time(), 0))
    finally:
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        for client in (shop, events, fulfilment):
            client.close()
    return {"receipted": receipted, "waited": deadline - last_receipt}
