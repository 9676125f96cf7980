"""The key: a price display needs the newest tick only. The subscriber lets the broker forget
each tick as it sends it (ack:auto), takes every tick that has arrived, and works on the newest
of them alone (conflation, the client's discard-oldest): the broker holds nothing for it, the
producer keeps its pace, and the price shown is never more than one tick old."""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    ticks = await client.subscribe(queue, ack="auto")
    received = 0
    while received < count:
        newest = await ticks.get(timeout=30)
        received += 1
        while received < count and (later := ticks.get_nowait()) is not None:
            newest, received = later, received + 1  # an older tick is worth nothing now
        work(newest.headers["message-id"])
    await client.disconnect()
