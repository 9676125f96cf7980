"""The same key with stomp.py: prefetch 1, client-individual, ACK after the work."""

import queue as queues

import stomp


def consume(host: str, port: int, queue: str, count: int, work) -> None:
    inbox: queues.Queue = queues.Queue()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):
            inbox.put(frame)

    conn = stomp.Connection12([(host, port)])
    conn.set_listener("", Listener())
    conn.connect(wait=True)
    conn.subscribe(queue, id="1", ack="client-individual", headers={"activemq.prefetchSize": "1"})
    for _ in range(count):
        frame = inbox.get(timeout=30)
        work(frame.headers["message-id"])
        conn.ack(frame.headers["ack"])
    conn.disconnect()
