"""Table-driven evaluation tests: (selector, headers, expected result).

``expected`` is the three-valued result: True, False, None (unknown), or
FAULT where ActiveMQ's evaluation throws (the message never matches).  Every
row is checked four ways: ``evaluate``, ``matches``, ``NOT (selector)`` (which
exercises the compiled FALSE-path) and ``(selector) IS NULL`` (which
exercises the value path).
"""

from __future__ import annotations

import pytest

from minibroker.selector import compile_selector

FAULT = "fault"
T, F, U = True, False, None

CASES: list[tuple[str, dict[str, str], object]] = [
    # -- string equality ---------------------------------------------------
    ("color = 'red'", {"color": "red"}, T),
    ("color = 'red'", {"color": "blue"}, F),
    ("color = 'red'", {}, U),
    ("color <> 'red'", {"color": "red"}, F),
    ("color <> 'red'", {"color": "blue"}, T),
    ("color <> 'red'", {}, U),
    ("'red' = color", {"color": "red"}, T),
    ("'red' = color", {}, U),  # ActiveMQ says FALSE here; JMS (and we) say unknown
    ("a = b", {"a": "x", "b": "x"}, T),
    ("a = b", {"a": "1", "b": "1.0"}, F),  # two strings: no number conversion
    ("a = b", {}, U),  # ActiveMQ says TRUE; JMS (and we) say unknown
    ("q = 'it''s'", {"q": "it's"}, T),
    ("name = 'Zoë ✓'", {"name": "Zoë ✓"}, T),
    ("Color = 'red'", {"color": "red"}, U),  # identifiers are case-sensitive
    ("$x = 'a' AND _y = 'b'", {"$x": "a", "_y": "b"}, T),
    ("a = 'x' and B = 'y' oR c is null", {"a": "x", "B": "y"}, T),  # keywords any case
    ("a='x'AND b='y'", {"a": "x", "b": "y"}, T),
    ("a = ''", {"a": ""}, T),
    ("a IS NULL", {"a": ""}, F),
    # -- string to number conversion (convertStringExpressions) ---------------
    ("weight > 2.5", {"weight": "3"}, T),
    ("weight > 2.5", {"weight": "2"}, F),
    ("weight > 2.5", {"weight": "2.5"}, F),
    ("weight > 2.5", {"weight": "heavy"}, F),  # not a number: FALSE, not unknown
    ("weight > 2.5", {}, U),
    ("weight > 2.5", {"weight": " 3 "}, T),  # Double.valueOf trims
    ("weight > 2.5", {"weight": "3f"}, T),  # ... and takes a type suffix
    ("weight > 2.5", {"weight": "1e1"}, T),
    ("weight > 2.5", {"weight": "Infinity"}, T),
    ("weight > 2.5", {"weight": "NaN"}, T),  # Double.compare puts NaN on top
    ("weight > 2.5", {"weight": "inf"}, F),  # Python's spelling, not Java's
    ("weight > 2.5", {"weight": "1_0"}, F),
    ("weight > 2", {"weight": "3"}, T),
    ("weight > 2", {"weight": "2.5"}, F),  # an integer literal wants an integer
    ("weight > 2", {"weight": "+3"}, T),
    ("weight > 2", {"weight": " 3"}, F),  # Long.valueOf does not trim
    ("weight = 3", {"weight": "03"}, T),
    ("weight = 3", {"weight": "3.0"}, F),
    ("weight = 3.0", {"weight": "3"}, T),
    ("weight <> 3", {"weight": "heavy"}, T),  # NOT (FALSE)
    ("weight <> 3", {"weight": "3"}, F),
    ("weight <> 3", {}, U),
    ("3 < weight", {"weight": "4"}, T),
    ("3 < weight", {"weight": "x"}, F),
    ("x = 9223372036854775807", {"x": "9223372036854775807"}, T),
    ("x = 9223372036854775807", {"x": "9223372036854775808"}, F),  # not a long
    ("x = 0x1F", {"x": "31"}, T),
    ("x = 017", {"x": "15"}, T),
    ("x = 0", {"x": "0"}, T),
    ("x = 10L", {"x": "10"}, T),
    ("x = 1e1", {"x": "10"}, T),
    ("x = 1.5E-1", {"x": "0.15"}, T),
    (".5 = x", {"x": "0.5"}, T),
    ("x = 5.", {"x": "5"}, T),
    ("x < y", {"x": "10", "y": "9"}, T),  # two strings order lexicographically
    # -- booleans ------------------------------------------------------------
    ("active = TRUE", {"active": "true"}, T),
    ("active = TRUE", {"active": "TRUE"}, T),
    ("active = TRUE", {"active": "false"}, F),
    ("active = TRUE", {"active": "yes"}, F),
    ("active = TRUE", {}, U),
    ("active = FALSE", {"active": "yes"}, T),  # Boolean.valueOf("yes") is false
    ("active <> FALSE", {"active": "true"}, T),
    ("active", {"active": "true"}, F),  # a string header is never a boolean
    ("active", {}, U),
    ("TRUE = active", {"active": "true"}, FAULT),  # ClassCastException in ActiveMQ
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NULL", {}, U),
    ("NOT NULL", {}, U),
    ("NOT FALSE", {}, T),
    ("(a = '1') = (b = '2')", {"a": "1", "b": "2"}, T),
    ("(a = '1') = (b = '2')", {"a": "1", "b": "3"}, F),
    ("(a = '1') = (b = '2')", {"a": "1"}, U),
    ("(a = '1') = 1", {"a": "1"}, F),  # boolean against number
    ("(a = '1' OR b = '1') = FALSE", {"a": "0", "b": "0"}, T),
    ("(a = '1' AND b = '1') = FALSE", {"a": "1"}, U),
    ("active = 1", {"active": "1"}, T),
    # -- arithmetic ----------------------------------------------------------
    ("1 + 2 * 3 = 7", {}, T),
    ("(1 + 2) * 3 = 9", {}, T),
    ("10 - 2 - 3 = 5", {}, T),
    ("8 / 2 / 2 = 2", {}, T),
    ("2 * 3 % 4 = 2", {}, T),
    ("7 / 2 = 3.5", {}, T),  # division is always in doubles
    ("-7 % 3 = -1", {}, T),  # Java's remainder keeps the dividend's sign
    ("- - 3 = 3", {}, T),
    ("+3 = 3", {}, T),
    ("9223372036854775807 + 1 < 0", {}, T),  # a Java long wraps around
    ("JMSPriority + 1 = 5", {}, T),
    ("JMSPriority * 2 = 8", {"priority": "4"}, T),
    ("JMSPriority / 2 = 2.5", {"priority": "5"}, T),
    ("JMSPriority % 3 = 1", {"priority": "7"}, T),
    ("JMSPriority / 0 > 1000", {}, T),  # Infinity
    ("0 / 0 = 0 / 0", {}, T),  # NaN equals NaN under Double.compare
    ("-JMSPriority = -4", {}, T),
    ("-x = -4", {"x": "4"}, U),  # negating a string gives NULL
    ("x + 1 = 3", {}, U),
    ("x + 1 = 3", {"x": "2"}, F),  # '2' + 1 concatenates to '21'
    ("x + 1 = 21", {"x": "2"}, T),
    ("x * 2 = 4", {"x": "2"}, FAULT),  # ActiveMQ throws on string arithmetic
    ("x - 1 = 1", {"x": "2"}, FAULT),
    ("JMSPriority + x = 5", {"x": "1"}, FAULT),
    ("name + '!' = 'James!'", {"name": "James"}, T),
    ("name + 2.5 = 'a2.5'", {"name": "a"}, T),
    ("name + 1e20 = 'a1.0E20'", {"name": "a"}, T),
    ("name + 0.0001 = 'a1.0E-4'", {"name": "a"}, T),
    ("name + TRUE = 'atrue'", {"name": "a"}, T),
    ("content-type = 'text/plain'", {"content-type": "text/plain"}, U),  # content - type
    # -- LIKE ----------------------------------------------------------------
    ("name LIKE 'Ja%'", {"name": "James"}, T),
    ("name LIKE 'Ja%'", {"name": "Bob"}, F),
    ("name LIKE 'Ja%'", {}, U),
    ("name LIKE '_ames'", {"name": "James"}, T),
    ("name LIKE 'J_s'", {"name": "James"}, F),
    ("name NOT LIKE 'Ja%'", {"name": "James"}, F),
    ("name NOT LIKE 'Ja%'", {"name": "Bob"}, T),
    ("name NOT LIKE 'Ja%'", {}, U),
    ("name LIKE '100!%' ESCAPE '!'", {"name": "100%"}, T),
    ("name LIKE '100!%' ESCAPE '!'", {"name": "1000"}, F),
    ("name LIKE '!_%' ESCAPE '!'", {"name": "_foo"}, T),
    ("name LIKE '!_%' ESCAPE '!'", {"name": "foo"}, F),
    ("name LIKE 'a!b' ESCAPE '!'", {"name": "a!b"}, T),  # escape before a plain char is literal
    ("name LIKE 'a!!b' ESCAPE '!'", {"name": "a!b"}, T),
    ("name LIKE 'a\\%' ESCAPE '\\'", {"name": "a%"}, T),
    ("name LIKE 'a\\%' ESCAPE '\\'", {"name": "ab"}, F),
    ("name LIKE 'a\\%'", {"name": "a\\bc"}, T),  # no ESCAPE: backslash is literal
    ("x LIKE '.*'", {"x": ".*"}, T),
    ("x LIKE '.*'", {"x": "abc"}, F),
    ("x LIKE '[ab]+(c)|d$^'", {"x": "[ab]+(c)|d$^"}, T),
    ("p LIKE '!#$&()*+,-./:;<=>?@[\\]^`{|}~'", {"p": "!#$&()*+,-./:;<=>?@[\\]^`{|}~"}, T),
    ("quote LIKE '''In G_d We Trust'''", {"quote": "'In God We Trust'"}, T),
    ("x LIKE 'a%b%c'", {"x": "aXbYc"}, T),
    ("x LIKE 'a%b%c'", {"x": "abc"}, T),
    ("x LIKE 'a%b%c'", {"x": "acb"}, F),
    ("x LIKE 'a%b_c'", {"x": "abbbc"}, T),
    ("x LIKE '%_%_'", {"x": "ab"}, T),
    ("x LIKE '%_%_'", {"x": "a"}, F),
    ("x LIKE '%'", {"x": ""}, T),
    ("x LIKE ''", {"x": ""}, T),
    ("x LIKE ''", {"x": "a"}, F),
    ("x LIKE 'a_c'", {"x": "a\nc"}, T),
    ("x LIKE '%a%a%a%a%a%a%a%a%b'", {"x": "a" * 5000}, F),  # no backtracking blow-up
    ("JMSPriority LIKE '4'", {}, F),  # LIKE on a non-string is FALSE
    ("JMSPriority NOT LIKE '4'", {}, T),
    # -- IN ------------------------------------------------------------------
    ("color IN ('red', 'green')", {"color": "red"}, T),
    ("color IN ('red', 'green')", {"color": "blue"}, F),
    ("color IN ('red', 'green')", {}, U),
    ("color NOT IN ('red', 'green')", {"color": "blue"}, T),
    ("color NOT IN ('red', 'green')", {"color": "red"}, F),
    ("color NOT IN ('red', 'green')", {}, U),
    ("JMSPriority IN ('4')", {}, U),  # IN on a non-string is unknown
    ("JMSType IN ('a', 'b', 'c', 'd', 'e', 'f')", {"type": "f"}, T),
    ("(color) IN ('red')", {"color": "red"}, T),
    # -- BETWEEN -------------------------------------------------------------
    ("w BETWEEN 1 AND 3", {"w": "2"}, T),
    ("w BETWEEN 1 AND 3", {"w": "3"}, T),
    ("w BETWEEN 1 AND 3", {"w": "4"}, F),
    ("w BETWEEN 1 AND 3", {"w": "x"}, F),
    ("w BETWEEN 1 AND 3", {}, U),
    ("w NOT BETWEEN 1 AND 3", {"w": "4"}, T),
    ("w NOT BETWEEN 1 AND 3", {"w": "2"}, F),
    ("w NOT BETWEEN 1 AND 3", {"w": "x"}, F),
    ("w NOT BETWEEN 1 AND 3", {}, U),
    ("w BETWEEN 1.5 AND 2.5", {"w": "2"}, T),
    ("w BETWEEN 1 AND 3 AND color = 'red'", {"w": "2", "color": "red"}, T),
    ("w BETWEEN 1 + 1 AND 2 * 2", {"w": "4"}, T),
    # -- IS NULL -------------------------------------------------------------
    ("x IS NULL", {}, T),
    ("x IS NULL", {"x": "a"}, F),
    ("x IS NOT NULL", {}, F),
    ("x IS NOT NULL", {"x": "a"}, T),
    ("(x = 1) IS NULL", {}, T),
    ("x = 1 IS NULL", {}, T),  # '=' and IS share a level: (x = 1) IS NULL
    # -- JMS header names and the STOMP headers ActiveMQ consumes ---------------
    ("JMSPriority = 4", {}, T),
    ("JMSPriority = 4", {"priority": "9"}, F),
    ("JMSPriority > 5", {"priority": "9"}, T),
    ("JMSPriority = 4", {"priority": "high"}, U),
    ("JMSPriority = '9'", {"priority": "9"}, T),
    ("priority > 5", {"priority": "9"}, U),  # consumed into JMSPriority
    ("priority IS NULL", {"priority": "9"}, T),
    ("type = 'order'", {"type": "order"}, U),
    ("persistent = 'true'", {"persistent": "true"}, U),
    ("JMSMessageID = 'ID:1'", {"message-id": "ID:1"}, T),
    ("JMSTimestamp > 1000", {"timestamp": "2000"}, T),
    ("JMSTimestamp > 1000", {}, U),
    ("JMSCorrelationID = 'c1'", {"correlation-id": "c1"}, T),
    ("JMSType = 'order'", {"type": "order"}, T),
    ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "true"}, T),
    ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "TRUE"}, F),
    ("JMSDeliveryMode = 'NON_PERSISTENT'", {}, T),
    ("JMSExpiration = 0", {}, T),
    ("JMSExpiration > 100", {"expires": "123"}, T),
    ("JMSReplyTo = 'queue://replies'", {"reply-to": "/queue/replies"}, T),
    ("JMSReplyTo IS NULL", {}, T),
    ("JMSDestination = 'queue://orders'", {"destination": "/queue/orders"}, T),
    ("JMSDestination = 'topic://t.x'", {"destination": "/topic/t.x"}, T),
    ("JMSDestination = 'temp-queue://q'", {"destination": "/temp-queue/q"}, T),
    (
        "JMSDestination = 'queue://orders'",
        {"destination": "/queue/ActiveMQ.DLQ", "original-destination": "/queue/orders"},
        T,
    ),
    ("JMSDestination LIKE 'queue://%'", {"destination": "/queue/x"}, T),
    ("JMSRedelivered", {"redelivered": "true"}, T),
    ("JMSRedelivered", {}, F),
    ("JMSRedelivered = TRUE", {"redelivered": "true"}, T),
    ("JMSXGroupID = 'g1'", {"JMSXGroupID": "g1"}, T),
    ("JMSXGroupSeq = 0", {}, T),
    ("JMSXGroupSeq = 3", {"JMSXGroupSeq": "3"}, T),
    ("JMSXUserID = 'bob'", {"JMSXUserID": "bob"}, T),
    ("JMSXDeliveryCount IS NULL", {}, T),
    ("jmspriority IS NULL", {}, T),  # not a JMS name: a plain, absent property
    # -- precedence and three-valued logic ------------------------------------
    ("NOT (x = 1)", {}, U),
    ("NOT (x = 1)", {"x": "2"}, T),
    ("NOT (NOT (x = 1))", {"x": "1"}, T),
    ("x = 1 OR TRUE", {}, T),
    ("x = 1 AND FALSE", {}, F),
    ("x = 1 AND TRUE", {}, U),
    ("x = 1 OR FALSE", {}, U),
    ("a = 1 OR b = 1 AND c = 1", {"a": "1", "b": "0", "c": "0"}, T),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1", "b": "0", "c": "0"}, F),
    ("a > 1 = TRUE", {"a": "2"}, T),  # '>' binds tighter than '='
    ("NOT a = 1", {"a": "1"}, F),  # (NOT a) = 1, ActiveMQ's precedence
    ("NOT a = 1", {"a": "2"}, F),
    ("NOT a = 1", {}, U),
    ("NOT a IS NULL", {}, T),  # (NOT a) IS NULL
    ("NOT a IS NULL", {"a": "x"}, F),  # NOT (FALSE) is not NULL
    ("a = 1 /* note */ AND b = 2", {"a": "1", "b": "2"}, T),
    ("a = 1 -- note\n AND b = 2", {"a": "1", "b": "2"}, T),
    ("a = 1 --note", {"a": "1"}, U),  # no newline: a = 1 - (-note), note is NULL
    ("x * 2 = 4 OR y = 'b'", {"x": "2", "y": "b"}, FAULT),  # ActiveMQ evaluates left first
    ("y = 'b' OR x * 2 = 4", {"x": "2", "y": "b"}, T),  # ... and stops at TRUE
    ("y = 'a' AND x * 2 = 4", {"x": "2", "y": "b"}, F),  # ... and stops at FALSE
]

_NOT: dict[object, object] = {True: False, False: True, None: None, FAULT: FAULT}


def _check(selector: str, headers: dict[str, str], expected: object) -> None:
    sel = compile_selector(selector)
    value = None if expected is FAULT else expected
    assert sel.evaluate(headers) is value, f"evaluate({selector!r}, {headers})"
    assert sel.matches(headers) is (expected is True), f"matches({selector!r}, {headers})"


@pytest.mark.parametrize("selector,headers,expected", CASES)
def test_evaluation(selector: str, headers: dict[str, str], expected: object) -> None:
    _check(selector, headers, expected)


@pytest.mark.parametrize("selector,headers,expected", CASES)
def test_negation(selector: str, headers: dict[str, str], expected: object) -> None:
    _check(f"NOT ({selector} )", headers, _NOT[expected])


@pytest.mark.parametrize("selector,headers,expected", CASES)
def test_is_null_of_result(selector: str, headers: dict[str, str], expected: object) -> None:
    _check(f"({selector} ) IS NULL", headers, FAULT if expected is FAULT else expected is None)


_KLEENE_INPUTS = {True: "1", False: "0", None: None}


def _kleene_cases() -> list[tuple[str, dict[str, str], object]]:
    rows: list[tuple[str, dict[str, str], object]] = []
    for x, xv in _KLEENE_INPUTS.items():
        for y, yv in _KLEENE_INPUTS.items():
            headers = {k: v for k, v in (("a", xv), ("b", yv)) if v is not None}
            if x is False or y is False:
                conj = False
            elif x is None or y is None:
                conj = None
            else:
                conj = True
            if x is True or y is True:
                disj = True
            elif x is None or y is None:
                disj = None
            else:
                disj = False
            rows.append(("a = 1 AND b = 1", headers, conj))
            rows.append(("a = 1 OR b = 1", headers, disj))
    return rows


@pytest.mark.parametrize("selector,headers,expected", _kleene_cases())
def test_three_valued_truth_tables(selector: str, headers: dict[str, str], expected: object) -> None:
    _check(selector, headers, expected)
    _check(f"NOT ({selector})", headers, _NOT[expected])
