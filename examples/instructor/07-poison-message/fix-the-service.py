"""The key: the service bounds its own retries. An order that fails three times is moved to a
queue of the service's own, /queue/orders.failed, with its headers and why, and only then
acknowledged: no loop, and the order is kept where someone can look at it."""

import asyncio
from collections import Counter

from clients.stomp import StompClient

TRIES = 3
FAILED = "/queue/orders.failed"


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    asyncio.run(_consume(host, port, queue, count, work))


async def _consume(host: str, port: int, queue: str, count: int, work) -> None:
    client = await StompClient.connect(host, port)
    orders = await client.subscribe(queue, ack="client-individual")
    failures: Counter[str] = Counter()
    processed = 0
    while processed < count or any(0 < n < TRIES for n in failures.values()):  # none left half-tried
        message = await orders.get(timeout=30)
        message_id = message.headers["message-id"]
        try:
            work(message_id, message.body)
        except ValueError as exc:
            failures[message_id] += 1
            if failures[message_id] < TRIES:
                await client.nack(message)
                continue
            kept = {k: v for k, v in message.headers.items() if k in ("order", "persistent")}
            kept |= {"original-destination": queue, "failure": str(exc), "persistent": "true"}
            await client.send(FAILED, message.body, headers=kept, receipt=True)  # kept before it is let go
        else:
            processed += 1
        await client.ack(message)
    await client.disconnect()
