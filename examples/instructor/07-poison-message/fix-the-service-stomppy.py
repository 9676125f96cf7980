"""The same bound with stomp.py: after three tries the poison order is NACKed with
requeue:false, and the broker dead-letters it instead of delivering it again."""

import queue as queues
from collections import Counter

import stomp

TRIES = 3


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    inbox: queues.Queue = queues.Queue()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):
            inbox.put(frame)

    conn = stomp.Connection12([(host, port)])
    conn.set_listener("", Listener())
    conn.connect(wait=True)
    conn.subscribe(queue, id="1", ack="client-individual")
    failures: Counter[str] = Counter()
    processed = 0
    while processed < count or any(0 < n < TRIES for n in failures.values()):  # none left half-tried
        frame = inbox.get(timeout=30)
        message_id = frame.headers["message-id"]
        try:
            work(message_id, frame.body)
        except ValueError:
            failures[message_id] += 1
            requeue = "true" if failures[message_id] < TRIES else "false"
            conn.nack(frame.headers["ack"], requeue=requeue)
            continue
        conn.ack(frame.headers["ack"])
        processed += 1
    conn.disconnect()
