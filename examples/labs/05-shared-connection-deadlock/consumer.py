"""A starting point for the fix-the-worker exercise: the lab's worker, and it gets stuck.

For each request it does the work, sends a reply and acknowledges the request, all on one
connection. `minibroker lab check 05 --client consumer.py` runs it against the real server
while a feeder floods the requests. Copy it, change it, check your copy.
"""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work, replies: str) -> None:
    asyncio.run(_consume(host, port, queue, count, work, replies))


async def _consume(host: str, port: int, queue: str, count: int, work, replies: str) -> None:
    client = await StompClient.connect(host, port)
    requests = await client.subscribe(queue, ack="client-individual")
    for _ in range(count):
        request = await requests.get(timeout=30)
        work(request.headers["message-id"])
        await client.send(replies, "done", {"request": request.headers["message-id"]}, timeout=None)
        await client.ack(request)
    await client.disconnect()
