"""minibroker's clients: the STOMP client library, the command-line tools,
the replay driver, the labs runner and the Spark jobs (``clients.spark``)."""
