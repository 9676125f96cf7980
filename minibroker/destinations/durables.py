"""Offline durable topic subscriptions removed after a timeout (ActiveMQ's
``offlineDurableSubscriberTimeout``).

A durable subscription keeps every message published while its subscriber is
away; one that never comes back keeps them for ever, and with them the journal
files they are in. With ``[broker] offline_durable_subscriber_timeout`` set,
``OfflineDurables`` looks every ``offline_durable_subscriber_task_schedule`` ms
(on the broker's timers, sans-IO) for subscriptions offline at least that long
and removes each with what it holds, as an UNSUBSCRIBE of it would.

Theory of operation:

- a subscription is offline from the moment its subscriber leaves
  (``Topic.remove_subscription`` sets ``DurableState.offline_since``), or, for
  one recovered from the store, from the first check that finds it offline;
- a subscriber that comes back clears ``offline_since`` (``handlers.py``).
"""

from __future__ import annotations

import logging

from minibroker.config import BrokerSection
from minibroker.connection.clock import Clock
from minibroker.connection.timers import Timers
from minibroker.destinations.registry import DestinationRegistry
from minibroker.destinations.topic import Topic

__all__ = ["OfflineDurables"]

log = logging.getLogger("minibroker.broker")


class OfflineDurables:
    """The periodic check for offline durable subscriptions past the timeout."""

    def __init__(self, settings: BrokerSection, registry: DestinationRegistry, clock: Clock, timers: Timers) -> None:
        self.registry, self.clock, self.timers = registry, clock, timers
        self.timeout = settings.offline_durable_subscriber_timeout / 1000
        self.period = settings.offline_durable_subscriber_task_schedule / 1000
        timers.call_at(clock.now() + self.period, self.check)

    def check(self) -> None:
        """Remove every durable subscription offline for at least the timeout; check again later."""
        now = self.clock.now()
        for topic in self.registry.values():
            if not isinstance(topic, Topic):
                continue
            for (client_id, name), state in list(topic.durables.items()):
                if state.active is not None:
                    continue
                if state.offline_since is None:
                    state.offline_since = now
                elif now - state.offline_since >= self.timeout:
                    held = len(state.pending)
                    topic.delete_durable(client_id, name)
                    log.info(
                        "%s: durable subscription %s/%s removed after %.0f s offline "
                        "(offline_durable_subscriber_timeout), with the %d message(s) it held",
                        topic.address,
                        client_id,
                        name,
                        now - state.offline_since,
                        held,
                    )
        self.timers.call_at(now + self.period, self.check)
