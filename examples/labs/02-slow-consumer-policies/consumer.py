"""A starting point for the fix-the-subscriber exercise: the lab's slow subscriber, and it
holds the producer back.

It shows the price of each tick in turn (work), then acknowledges it, ten ticks in flight at
most, as the lab's slow subscriber does. `minibroker lab check 02 --client consumer.py` runs it
against the real server. Copy it, change it, check your copy.
"""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    ticks = await client.subscribe(queue, ack="client-individual", prefetch=10)
    for _ in range(count):
        tick = await ticks.get(timeout=30)
        work(tick.headers["message-id"])
        await client.ack(tick)
    await client.disconnect()
