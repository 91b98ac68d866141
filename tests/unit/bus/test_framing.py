"""The publish fast path must produce byte-for-byte what the NATS protocol expects."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.errors import BadSubjectError

from corral_bus.framing import encode_headers, frame


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


def test_frame_with_and_without_headers() -> None:
    headers = encode_headers({"Nats-Msg-Id": "1"})
    assert frame("lh.obj.a", "_INBOX.x.1", None, b"hello") == b"PUB lh.obj.a _INBOX.x.1 5\r\nhello\r\n"
    framed = frame("lh.obj.a", "_INBOX.x.1", headers, b"hello")
    head, rest = framed.split(b"\r\n", 1)
    assert head == b"HPUB lh.obj.a _INBOX.x.1 %d %d" % (len(headers), len(headers) + 5)
    assert rest == headers + b"hello\r\n"


@pytest.mark.parametrize("subject", ["", "a b", "a\tb", "a\r\nb"])
def test_bad_subjects_are_refused(subject: str) -> None:
    with pytest.raises(BadSubjectError):
        frame(subject, "r", None, b"")


@given(
    st.binary(max_size=2048),
    st.dictionaries(st.sampled_from(["Nats-Msg-Id", "traceparent", "X-A"]), st.text()),
)
def test_sizes_in_the_frame_match_its_parts(payload: bytes, headers: dict[str, str]) -> None:
    block = encode_headers(headers) if headers else None
    framed = frame("s.t", "r.1", block, payload)
    head, body = framed.split(b"\r\n", 1)
    sizes = [int(x) for x in head.split()[3:]]
    assert body.endswith(b"\r\n")
    assert sizes[-1] == len(body) - 2
    if block is not None:
        assert sizes[0] == len(block)
