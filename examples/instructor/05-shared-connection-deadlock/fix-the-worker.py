"""The key: one connection to consume and acknowledge, another to send the replies. Flow
control may hold the reply connection while memory is full, but the ACKs go on the other one,
so the memory they free reaches the broker and the held reply goes on."""

import asyncio

from clients.stomp import StompClient


def consume(host: str, port: int, queue: str, count: int, work, replies: str) -> None:
    asyncio.run(_consume(host, port, queue, count, work, replies))


async def _consume(host: str, port: int, queue: str, count: int, work, replies: str) -> None:
    consumer = await StompClient.connect(host, port)
    producer = await StompClient.connect(host, port)
    requests = await consumer.subscribe(queue, ack="client-individual")
    for _ in range(count):
        request = await requests.get(timeout=30)
        work(request.headers["message-id"])
        await producer.send(replies, "done", {"request": request.headers["message-id"]}, timeout=None)
        await consumer.ack(request)
    await producer.disconnect()
    await consumer.disconnect()
