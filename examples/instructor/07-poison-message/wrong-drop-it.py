"""A common wrong answer: acknowledge the order that fails, so it never comes back. The loop
ends, and the order is gone without a trace. Graded mitigated."""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    orders = await client.subscribe(queue, ack="client-individual")
    processed = 0
    while processed < count:
        message = await orders.get(timeout=30)
        try:
            work(message.headers["message-id"], message.body)
            processed += 1
        except ValueError:
            pass  # skip it
        await client.ack(message)
    await client.disconnect()
