"""A starting point for the fix-the-service exercise: the lab's order service, and it loops.

It NACKs an order it cannot process, so that it is tried again; on a broker without a
delivery limit the poison order comes straight back, again and again.
`minibroker lab check 07 --client consumer.py` runs it against the real server. Copy it,
change it, check your copy.
"""

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
        except ValueError:
            await client.nack(message)  # try it again later
            continue
        await client.ack(message)
        processed += 1
    await client.disconnect()
