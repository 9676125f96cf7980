"""activemq.xml written from our configuration reads back, with doctor's own reader, as the same settings.

``lab run --against activemq`` starts ActiveMQ with ``write_xml``'s file; these
tests check it says what the lab's TOML says, and that what it cannot say is
named (a departure) rather than dropped in silence.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clients.doctor.read_xml import read_xml
from clients.doctor.write_xml import write_xml
from minibroker.config import BrokerConfig, PolicyEntry, load_config

LABS = Path(__file__).resolve().parents[2] / "examples" / "labs"
CONFIGS = sorted(p for p in LABS.glob("*/*.toml") if p.name != "lab.toml")

#: Transport options an activemq.xml connector carries (the rest are ours alone).
CONNECTOR_OPTIONS = (
    "so_write_timeout",
    "connect_timeout",
    "default_heart_beat",
    "max_frame_size",
    "max_data_length",
    "allow_link_stealing",
    "hb_grace_period_multiplier",
)
#: Store options KahaDB and the temp store carry.
STORE_OPTIONS = (
    "journal_max_file_length",
    "temp_journal_max_file_length",
    "fsync",
    "compact_acks_after_no_gc",
    "compact_acks_ignores_store_growth",
    "cleanup_interval",
    "checkpoint_interval",
)


def round_trip(config: BrokerConfig) -> tuple[BrokerConfig, BrokerConfig, set[str]]:
    """(what we meant, what doctor reads back, the departed keys)."""
    written = write_xml(config, stomp_port=61999, openwire_port=61998)
    setup = read_xml("generated.xml", written.text.encode())
    (listener,) = setup.listeners
    back = setup.config.replace(transport={k: getattr(listener.transport, k) for k in CONNECTOR_OPTIONS})
    return config, back, {d.key for d in written.departures}


def expected_policy(entry: PolicyEntry, index: int, departed: set[str]) -> PolicyEntry:
    """``entry`` with every departed option at what ActiveMQ's file leaves it (our default but
    the cursor: a queue's is the store cursor, read as "file")."""
    defaults = PolicyEntry()
    changes = {
        f.name: getattr(defaults, f.name)
        for f in dataclasses.fields(PolicyEntry)
        if f"destination_policy[{index}].{f.name}" in departed
    }
    return dataclasses.replace(entry, **changes)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_lab_configuration_reads_back_the_same(path: Path) -> None:
    config, back, departed = round_trip(load_config(path))
    assert back.system_usage == config.system_usage
    assert back.broker.name == config.broker.name and back.broker.persistent == config.broker.persistent
    for key in STORE_OPTIONS:
        assert getattr(back.store, key) == getattr(config.store, key), key
    for key in CONNECTOR_OPTIONS:
        assert getattr(back.transport, key) == getattr(config.transport, key), key
    assert len(back.destination_policy) == len(config.destination_policy)
    for i, (mine, theirs) in enumerate(zip(config.destination_policy, back.destination_policy, strict=True)):
        assert theirs == expected_policy(mine, i, departed), f"destination_policy[{i}]"


def test_what_activemq_cannot_say_is_named_with_the_broker_that_can() -> None:
    legacy = write_xml(
        load_config(LABS / "00-starving-consumers" / "legacy.toml"), stomp_port=61999, openwire_port=61998
    )
    (space,) = legacy.departs("space_check")
    assert "5.14" in space.why and space.value == "legacy"
    (cursor,) = legacy.departs("pending_cursor")  # the queue's vm cursor for non-persistent messages
    assert cursor.value == "vm"
    slow = write_xml(
        load_config(LABS / "03-prefetch-stalled-socket" / "slow-store.toml"), stomp_port=61999, openwire_port=61998
    )
    assert [d.key for d in slow.departures] == ["store.store_latency"]
    current = write_xml(
        load_config(LABS / "00-starving-consumers" / "current.toml"), stomp_port=61999, openwire_port=61998
    )
    assert not current.departs("space_check")


def test_the_connector_listens_where_asked_and_nowhere_else() -> None:
    text = write_xml(BrokerConfig(), stomp_port=40001, openwire_port=40002).text
    assert 'uri="stomp://127.0.0.1:40001' in text and 'uri="tcp://127.0.0.1:40002"' in text
    assert "61613" not in text and "61616" not in text and "0.0.0.0" not in text


def test_redelivery_goes_to_the_plugin_and_dead_letters_to_the_entry() -> None:
    """Lab 07's cure as ActiveMQ has it: a redelivery policy of the broker's redeliveryPlugin
    (which needs the scheduler), each queue's own dead letter queue without the expired."""
    back_off = load_config(LABS / "07-poison-message" / "back-off.toml").replace(
        destination_policy=(
            PolicyEntry(
                queue=">",
                maximum_redeliveries=6,
                initial_redelivery_delay=1000,
                use_exponential_back_off=True,
                back_off_multiplier=2.0,
                dead_letter_strategy="individual",
                process_expired=False,
            ),
        )
    )
    written = write_xml(back_off, stomp_port=61999, openwire_port=61998)
    assert not written.departures
    text = written.text
    assert 'schedulerSupport="true"' in text
    assert '<redeliveryPolicy queue=">" maximumRedeliveries="6" initialRedeliveryDelay="1000"' in text
    assert 'useExponentialBackOff="true" backOffMultiplier="2.0"' in text
    assert (
        '<individualDeadLetterStrategy queuePrefix="ActiveMQ.DLQ.Queue."' in text and 'processExpired="false"' in text
    )
    back = read_xml("generated.xml", text.encode()).config.destination_policy[0]
    assert (back.maximum_redeliveries, back.initial_redelivery_delay, back.back_off_multiplier) == (6, 1000, 2.0)
    assert back.dead_letter_strategy == "individual" and back.process_expired is False


def test_a_redelivery_delay_the_plugin_refuses_is_named() -> None:
    """The redeliveryPlugin refuses to start with a delay under a second: such a delay (lab 07's
    own 500 ms) is a departure, and no plugin is written (nor the scheduler)."""
    written = write_xml(
        load_config(LABS / "07-poison-message" / "back-off.toml"), stomp_port=61999, openwire_port=61998
    )
    (delay,) = written.departs("initial_redelivery_delay")
    assert delay.value == 500 and "1000 ms" in delay.why and "dead-letters the message at once" in delay.why
    assert "redeliveryPlugin" not in written.text and "schedulerSupport" not in written.text
    shared = PolicyEntry(queue=">", dead_letter_queue="Orders.DLQ")
    text = write_xml(BrokerConfig(destination_policy=(shared,)), stomp_port=61999, openwire_port=61998).text
    assert '<queue physicalName="Orders.DLQ"/>' in text
    assert read_xml("g.xml", text.encode()).config.destination_policy[0].dead_letter_queue == "Orders.DLQ"


def test_ack_compaction_is_kahadbs() -> None:
    """store.compact_acks_after_no_gc is KahaDB's compactAcksAfterNoGC, and reads back."""
    config = BrokerConfig().replace(store={"compact_acks_after_no_gc": 2, "compact_acks_ignores_store_growth": True})
    text = write_xml(config, stomp_port=61999, openwire_port=61998).text
    assert 'enableAckCompaction="true" compactAcksAfterNoGC="2" compactAcksIgnoresStoreGrowth="true"' in text
    back = read_xml("g.xml", text.encode()).config.store
    assert (back.compact_acks_after_no_gc, back.compact_acks_ignores_store_growth) == (2, True)


def test_kahadbs_cleanup_and_checkpoint_intervals_go_to_activemq_and_back() -> None:
    """Lab 06 on ActiveMQ: its KahaDB deletes a free file only at a cleanup (every 30 s by
    default); the lab's configuration asks for one every second, and the doctor reads it back."""
    config = load_config(LABS / "06-journal-kept-alive" / "kahadb.toml")
    assert (config.store.cleanup_interval, config.store.checkpoint_interval) == (1000, 500)
    text = write_xml(config, stomp_port=61999, openwire_port=61998).text
    assert 'cleanupInterval="1000"' in text and 'checkpointInterval="500"' in text
    _, back, _ = round_trip(config)
    assert (back.store.cleanup_interval, back.store.checkpoint_interval) == (1000, 500)
    # ActiveMQ's defaults are ours: a configuration that leaves them says nothing of them.
    default = write_xml(BrokerConfig(), stomp_port=61999, openwire_port=61998).text
    assert "cleanupInterval" not in default and "checkpointInterval" not in default
