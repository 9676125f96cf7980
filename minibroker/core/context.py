"""What every part of the core is given: the broker's shared services, read-only.

The ``Broker`` makes one ``CoreContext`` and hands it to each part it makes
(``broker.py``). A part:

- reads the services it needs from the context, and binds the ones it calls per
  message once, in its constructor (no attribute hop on the hot path);
- is given its sibling parts explicitly, typed by their class or by a small
  Protocol beside the part that needs them;
- is given callables only for what the ``Broker`` itself does (close a
  connection, answer a protocol error, handle a frame).

The context holds no state of its own, and nothing in it is replaced while the
broker runs: the tables it names (the sessions, the destinations) change, the
context does not.
"""

from __future__ import annotations

from typing import NamedTuple

from minibroker.config import BrokerConfig
from minibroker.connection.clock import Clock
from minibroker.connection.security import Security
from minibroker.connection.session import Session
from minibroker.connection.timers import Timers
from minibroker.destinations.destination import Destination
from minibroker.destinations.registry import DestinationRegistry
from minibroker.destinations.usage import Usage
from minibroker.durability.persistence import MessageStore
from minibroker.trace import Recorder

__all__ = ["CoreContext"]


class CoreContext(NamedTuple):
    """The broker's shared services, as every part of the core is given them.

    - ``config``, ``clock``, ``timers``, ``trace``: the configuration, the time
      (never read from the system), the timers the edge runs, the event trace;
    - ``security``: who may do what; ``store``: the journals (None: a
      non-persistent broker);
    - ``memory``, ``store_usage``, ``temp_usage``: the usage tree's roots;
    - ``registry`` and ``destinations`` (its destinations by address);
    - ``sessions``: the open connections by session id;
    - ``name`` and ``boot``: the broker's name and this run's token.
    """

    config: BrokerConfig
    clock: Clock
    timers: Timers
    trace: Recorder
    security: Security
    store: MessageStore | None
    memory: Usage
    store_usage: Usage
    temp_usage: Usage
    registry: DestinationRegistry
    destinations: dict[str, Destination]
    sessions: dict[int, Session]
    name: str
    boot: str

    def session_tag(self, sid: int) -> str:
        """The session id of connection ``sid`` as CONNECTED announced it (the trace's ``session``)."""
        return f"{self.name}-{self.boot}-{sid}"
