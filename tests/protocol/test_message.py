"""The page-in's ``Message``, made by position, against one made by keywords.

A page-in makes one ``Message`` per store-only message and passes its
arguments by position (with keywords, making one costs twice as much); an
argument in the wrong place would go unnoticed by a type checker (priority,
expires and timestamp are all ints), so whatever a payload decodes to, the
two must make the same message.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.durability import decode_messages, decode_payload, encode_payload
from minibroker.protocol import Message

HEADER_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)

#: Every field a Message holds: its slots, or the attributes of the compiled class (which has no __slots__).
MESSAGE_FIELDS: tuple[str, ...] = getattr(Message, "__slots__", None) or Message.__mypyc_attrs__  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(
    headers=st.dictionaries(HEADER_TEXT.filter(bool), HEADER_TEXT, max_size=5),
    body=st.binary(max_size=64),
    persistent=st.booleans(),
    priority=st.integers(0, 9),
    expires=st.sampled_from([0, 1_700_000_000_000]),
    message_id=st.one_of(st.just("ID:host-1:2:3"), st.text(st.sampled_from("ID:\\c\nx"), min_size=1, max_size=8)),
)
def test_a_paged_in_message_is_the_message_keywords_make(
    headers: dict[str, str], body: bytes, persistent: bool, priority: int, expires: int, message_id: str
) -> None:
    payload = encode_payload(
        7, message_id, headers, body, persistent=persistent, priority=priority, expires=expires, timestamp=123
    )
    s = decode_payload(payload)
    [paged] = decode_messages([payload], [7], "/queue/q")
    # A plain block (ASCII, no escapes) is left undecoded, its id too; any other is decoded at once.
    plain = s.wire_headers is not None and s.wire_headers.isascii() and b"\\" not in s.wire_headers
    by_keywords = Message(
        7,
        None if plain else s.message_id,
        "/queue/q",
        None if plain else s.headers,
        s.body,
        persistent=s.persistent,
        priority=s.priority,
        expires=s.expires,
        timestamp=s.timestamp,
        message_id_wire=s.wire_message_id,
        wire_headers=s.wire_headers,
        header_chars=sum(map(len, headers)) + sum(map(len, headers.values())) if plain else 0,
    )
    assert {slot: getattr(paged, slot) for slot in MESSAGE_FIELDS} == {
        slot: getattr(by_keywords, slot) for slot in MESSAGE_FIELDS
    }
    assert (paged.message_id, paged.headers, paged.persistent, paged.priority, paged.expires, paged.timestamp) == (
        message_id,
        headers,
        persistent,
        priority,
        expires,
        123,
    )  # the id unescaped on first use when plain
    for version in ("1.0", "1.1", "1.2"):
        assert paged.tail(version) == by_keywords.tail(version)
        # What an auto-ack delivery writes after its subscription's first lines (kept for 1.2).
        for _ in range(2):
            assert paged.rest(version) == paged.message_id_wire(version) + b"\n" + paged.tail(version)


def test_a_message_needs_its_id_in_one_form_or_the_other() -> None:
    import pytest

    with pytest.raises(ValueError, match="message-id"):
        Message(1, None, "/queue/q", {}, b"")
    assert Message(1, None, "/queue/q", {}, b"", message_id_wire=b"ID\\ch-1\\c1").message_id == "ID:h-1:1"
