"""The key: one message in flight (activemq.prefetchSize:1), each acknowledged on its own
after the work, so an ACK costs the slow store 5 ms x 2, not 5 ms x every message in flight."""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    subscription = await client.subscribe(queue, ack="client-individual", prefetch=1)
    for _ in range(count):
        message = await subscription.get(timeout=30)
        work(message.headers["message-id"])
        await client.ack(message)
    await client.disconnect()
