"""The publish frames must be byte-for-byte what the NATS protocol expects."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.errors import BadSubjectError

from corral_bus.framing import check, encode_headers, frame


def test_headers_block() -> None:
    assert encode_headers({"Nats-Msg-Id": "volume:u1:7", "traceparent": "00-ab-cd-01"}) == (
        b"NATS/1.0\r\nNats-Msg-Id: volume:u1:7\r\ntraceparent: 00-ab-cd-01\r\n\r\n"
    )


def test_header_values_cannot_inject_protocol() -> None:
    block = encode_headers({"X": "a\r\nPUB evil 1\r\n"})
    assert block.count(b"\r\n") == 3  # status line, the one header, the blank line
    assert b"PUB evil" in block  # kept as text inside the value


@pytest.mark.parametrize("name", ["", "bad name", "colon:name", "new\nline"])
def test_bad_header_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid header name"):
        encode_headers({name: "v"})


def test_frame_without_headers_with_the_id_only_and_with_headers() -> None:
    assert frame("lh.obj.a", b"_INBOX.x.1", "", None, b"hello") == b"PUB lh.obj.a _INBOX.x.1 5\r\nhello\r\n"
    block = encode_headers({"Nats-Msg-Id": "1"})
    no_headers: tuple[dict[str, str] | None, ...] = (None, {})
    for headers in no_headers:
        framed = frame("lh.obj.a", b"_INBOX.x.1", "1", headers, b"hello")
        head, rest = framed.split(b"\r\n", 1)
        assert head == b"HPUB lh.obj.a _INBOX.x.1 %d %d" % (len(block), len(block) + 5)
        assert rest == block + b"hello\r\n"
    framed = frame("lh.obj.a", b"r", "1", {"Nats-TTL": "5s"}, b"")
    assert framed.split(b"\r\n", 1)[1] == encode_headers({"Nats-Msg-Id": "1", "Nats-TTL": "5s"}) + b"\r\n"


def test_a_message_id_cannot_inject_protocol() -> None:
    with pytest.raises(ValueError, match="invalid message id"):
        check("s", "id\r\nPUB evil 1")
    framed = frame("s", b"r", "id\r\nPUB evil 1", {}, b"x")  # in a header block: a space
    assert framed.count(b"\r\n") == 5  # control line, status line, the one header, blank line, end


@pytest.mark.parametrize("subject", ["", "a b", "a\tb", "a\r\nb"])
def test_bad_subjects_are_refused(subject: str) -> None:
    with pytest.raises(BadSubjectError):
        check(subject, "id")
    check("lh.obj.volume.ns.a", "id")  # a good one passes


@given(
    st.binary(max_size=2048),
    st.text(max_size=40),
    st.dictionaries(st.sampled_from(["traceparent", "X-A", "Nats-TTL"]), st.text()),
)
def test_sizes_in_the_frame_match_its_parts(payload: bytes, msg_id: str, headers: dict[str, str]) -> None:
    framed = frame("s.t", b"r.1", msg_id, headers, payload)
    head, body = framed.split(b"\r\n", 1)
    sizes = [int(x) for x in head.split()[3:]]
    assert body.endswith(b"\r\n")
    assert sizes[-1] == len(body) - 2
    assert body[sizes[-1] - len(payload) : sizes[-1]] == payload
    if msg_id or headers:
        block = body[: sizes[0]]
        assert block.startswith(b"NATS/1.0\r\n") and block.endswith(b"\r\n\r\n")
        assert block.count(b"\r\n") == 2 + bool(msg_id) + len(headers)


def test_frame_with_an_expected_last_subject_sequence() -> None:
    expected = {"Nats-Msg-Id": "1", "Nats-Expected-Last-Subject-Sequence": "42"}
    framed = frame("lh.obj.a", b"r", "1", None, b"hello", expect=42)
    block = encode_headers(expected)
    assert framed == b"HPUB lh.obj.a r %d %d\r\n%bhello\r\n" % (len(block), len(block) + 5, block)
    framed = frame("lh.obj.a", b"r", "1", {"Nats-TTL": "5s"}, b"", expect=0)
    with_ttl = {"Nats-Msg-Id": "1", "Nats-TTL": "5s", "Nats-Expected-Last-Subject-Sequence": "0"}
    assert framed.split(b"\r\n", 1)[1] == encode_headers(with_ttl) + b"\r\n"
    assert b"Expected" not in frame("lh.obj.a", b"r", "1", None, b"", expect=-1)
