"""A common wrong answer: ack:auto. Nothing stalls, but the broker forgets each message as
it sends it: a consumer that dies mid-work loses what it held. Graded mitigated."""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    subscription = await client.subscribe(queue, ack="auto", prefetch=1)
    for _ in range(count):
        message = await subscription.get(timeout=30)
        work(message.headers["message-id"])
    await client.disconnect()
