"""A starting point for the fix-the-consumer exercise: the lab's consumer, and it stalls.

`minibroker lab check 03 --client consumer.py` runs it against the real server with the lab's
slow store. Copy it, change it, check your copy.
"""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    subscription = await client.subscribe(queue, ack="client")
    for _ in range(count):
        message = await subscription.get(timeout=30)
        work(message.headers["message-id"])
        await client.ack(message)
    await client.disconnect(timeout=None)  # wait for the broker to take every ACK
