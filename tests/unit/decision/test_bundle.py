"""The bundle format: exact times, payloads kept as they were, and unreadable lines named by number."""

from __future__ import annotations

import base64
import json

import pytest

from corral_decision.bundle import (
    BadLine,
    Line,
    encode,
    entry,
    format_time,
    parse_time,
    read_bundle,
    sorted_entries,
)

T0 = 1_795_588_228_109_157_260  # 2026-11-25T06:30:28.109157260Z


def test_times_keep_their_nanoseconds() -> None:
    assert format_time(T0) == "2026-11-25T06:30:28.109157260Z"
    assert parse_time(format_time(T0)) == T0
    assert parse_time("2026-11-25T06:30:28Z") == T0 - 109_157_260
    assert parse_time("2026-11-25T07:30:28.1+01:00") == T0 - 9_157_260
    with pytest.raises(ValueError):
        parse_time("yesterday")


def test_json_payloads_stay_inline_and_the_rest_goes_base64() -> None:
    event = b'{"schema":"corral.event/v1","type":"ADDED","kind":"volume","namespace":"ns","name":"v"}'
    line = encode(entry("LH_OBJECTS", 3, T0, "lh.obj.volume.ns.v", {"Nats-Msg-Id": "x"}, event))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    document = json.loads(line)
    assert document["payload"]["name"] == "v" and "base64" not in document
    assert [k for k in document] == ["stream", "seq", "time", "subject", "headers", "payload"]

    binary = b"\x00\xffnot json"
    line = encode(entry("LH_DEAD", 4, T0, "lh.dead.x", None, binary))
    document = json.loads(line)
    assert document["base64"] is True and base64.b64decode(document["payload"]) == binary

    pretty = b'{\n  "a": 1\n}'
    line = encode(entry("LH_RESULTS", 5, T0, "lh.res.x", None, pretty))
    assert line.count(b"\n") == 1
    (read,) = read_bundle([line])
    assert isinstance(read, Line) and json.loads(read.entry.data) == {"a": 1}


def test_a_line_reads_back_to_the_same_bytes() -> None:
    for data in (b'{"k":[1,2.5,"\\u00e9"]}', b"\x01\x02"):
        (read,) = read_bundle([encode(entry("LH_OBJECTS", 1, T0, "s", {}, data))])
        assert isinstance(read, Line) and read.entry.data == data and read.time_ns == T0


def test_unreadable_lines_are_named_by_number_and_reading_goes_on() -> None:
    good = encode(entry("LH_OBJECTS", 1, T0, "s", {}, b"{}"))
    lines = [good, b"\n", b"{not json}\n", good.replace(b'"seq":1', b'"seq":"one"'), good, good[:40]]
    read = list(read_bundle(lines))
    assert [type(x).__name__ for x in read] == ["Line", "BadLine", "BadLine", "Line", "BadLine"]
    assert [x.number for x in read] == [1, 3, 4, 5, 6]  # the blank line 2 is skipped
    last = read[-1]
    assert isinstance(last, BadLine) and last.reason.startswith("truncated")
    bad_base64 = good.replace(b'"payload":{}', b'"payload":"%%%","base64":true')
    (bad,) = read_bundle([bad_base64])
    assert isinstance(bad, BadLine)


def test_bundle_order_is_time_then_stream_then_sequence() -> None:
    a = entry("LH_RESULTS", 1, T0, "r", {}, b"{}")
    b = entry("LH_OBJECTS", 9, T0, "o", {}, b"{}")
    c = entry("LH_OBJECTS", 2, T0, "o", {}, b"{}")
    d = entry("LH_COMMANDS", 7, T0 - 1, "c", {}, b"{}")
    assert sorted_entries([(T0, a), (T0, b), (T0, c), (T0 - 1, d)]) == [d, c, b, a]


def test_invalid_utf8_is_kept_as_it_was_and_a_line_of_it_is_named() -> None:
    """A JSON-looking payload with a byte that is not UTF-8 is recorded in base64 (it is what was on
    the bus); a bundle line carrying such a byte itself is a bad line, and reading goes on."""
    payload = b'{"schema":"corral.event/v1","name":"\xff"}'
    line = encode(entry("LH_OBJECTS", 1, T0, "lh.obj.volume.ns.v", {}, payload))
    (read,) = read_bundle([line])
    assert isinstance(read, Line) and read.entry.base64 and read.entry.data == payload
    good = encode(entry("LH_OBJECTS", 2, T0, "s", {}, b"{}"))
    broken = good.replace(b'"s"', b'"s\xff"')
    assert [type(x).__name__ for x in read_bundle([broken, good])] == ["BadLine", "Line"]
