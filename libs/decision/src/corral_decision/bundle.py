"""A recorded bus as a file: the JSON-lines bundle `corral events dump` writes and `corral replay` reads.

A decision is debugged after the fact from what the bus held: the object events the decider saw,
the commands it published and the results the actuator reported. One line per message, with the
stream's own facts about it (stream, sequence, store time, subject, headers), so a bundle can be
read with `jq`, diffed, cut with `head`, and replayed in the order the streams stored it::

    {"stream":"LH_OBJECTS","seq":42,"time":"2026-11-25T06:19:08.123456789Z",
     "subject":"lh.obj.volume.longhorn-system.vol-1","headers":{"Nats-Msg-Id":"…"},"payload":{…}}

`payload` is the message itself when it is JSON (every corral envelope is), else its bytes in base64
as a JSON string with `"base64":true`. `time` is the stream's timestamp in RFC 3339 with nanoseconds
(UTC), exactly as JetStream reports it, so ordering is exact. `seq` is 0 for a command recorded live
from core NATS (`corral events dump --follow`), which has no stream sequence yet.

Lines are ordered by time, then stream, then sequence (`order_key`); what `--follow` records after
that comes in the order it arrived (stream order within each stream). A line that cannot be read (a
truncated last line, an edited line that is no longer JSON) becomes a `BadLine` with its number, so
a reader reports it and goes on.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

_NS = 1_000_000_000


class BundleEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One recorded message."""

    stream: str
    seq: int
    time: str
    subject: str
    headers: dict[str, str] = {}
    payload: msgspec.Raw
    base64: bool = False

    @property
    def data(self) -> bytes:
        """The message's bytes as they were on the bus (JSON re-serialised compactly only when the
        original spanned lines)."""
        if self.base64:
            return base64.b64decode(msgspec.json.decode(self.payload, type=str), validate=True)
        return bytes(self.payload)


def entry(
    stream: str, seq: int, time_ns: int, subject: str, headers: dict[str, str] | None, data: bytes
) -> BundleEntry:
    """The bundle line of one message: its payload inline when it is JSON, else in base64."""
    payload: msgspec.Raw | None = None
    try:
        msgspec.json.decode(data)
        # One line per message: a pretty-printed payload is made compact (same value).
        payload = msgspec.Raw(
            data if b"\n" not in data and b"\r" not in data else msgspec.json.format(data, indent=-1)
        )
    except Exception:  # not JSON, or not UTF-8: kept as it was, in base64
        pass
    headers = dict(sorted((headers or {}).items()))
    if payload is None:
        encoded = msgspec.json.encode(base64.b64encode(data).decode())
        return BundleEntry(
            stream=stream,
            seq=seq,
            time=format_time(time_ns),
            subject=subject,
            headers=headers,
            payload=msgspec.Raw(encoded),
            base64=True,
        )
    return BundleEntry(
        stream=stream, seq=seq, time=format_time(time_ns), subject=subject, headers=headers, payload=payload
    )


_encoder = msgspec.json.Encoder()


def encode(record: BundleEntry) -> bytes:
    """One bundle line, newline included."""
    return _encoder.encode(record) + b"\n"


def format_time(time_ns: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 in UTC with nine fractional digits."""
    seconds, fraction = divmod(time_ns, _NS)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


def parse_time(text: str) -> int:
    """RFC 3339 (any number of fractional digits, `Z` or an offset) as nanoseconds since the epoch;
    ValueError otherwise. Python's datetime stops at microseconds, so the fraction is read apart."""
    head, fraction, zone = text, "", "+00:00"
    if head.endswith(("Z", "z")):
        head = head[:-1]
    elif len(head) > 6 and head[-6] in "+-" and head[-3] == ":":
        head, zone = head[:-6], head[-6:]
    if "." in head:
        head, fraction = head.split(".", 1)
        if not fraction.isdigit() or len(fraction) > 9:
            raise ValueError(f"bad fractional seconds in {text!r}")
    moment = datetime.datetime.fromisoformat(head + zone)
    return int(moment.timestamp()) * _NS + int(fraction.ljust(9, "0") or "0")


def order_key(record: BundleEntry, time_ns: int) -> tuple[int, str, int]:
    """Bundle order: store time, then stream, then sequence."""
    return (time_ns, record.stream, record.seq)


@dataclass(frozen=True, slots=True)
class Line:
    """A readable bundle line: its 1-based number in the file, the message, and its time in ns."""

    number: int
    entry: BundleEntry
    time_ns: int

    @property
    def where(self) -> str:
        """How output points at this line: `line 12 lh.obj.volume.ns.vol-1 seq 40`."""
        seq = f" seq {self.entry.seq}" if self.entry.seq else ""
        return f"line {self.number} {self.entry.subject}{seq}"


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not a bundle entry: reported with its number, never silently dropped."""

    number: int
    reason: str


_decoder = msgspec.json.Decoder(BundleEntry)


def read_line(number: int, raw: bytes | str) -> Line | BadLine | None:
    """One line of a bundle (None for a blank line)."""
    text = raw.encode() if isinstance(raw, str) else raw
    if not text.strip():
        return None
    try:
        record = _decoder.decode(text)
        time_ns = parse_time(record.time)
        if record.base64:
            record.data  # noqa: B018 - validates the base64 now, so a bad payload names its line
    except Exception as e:  # msgspec's errors, invalid UTF-8, a bad time or base64: a bad line
        reason = str(e)
        if not text.endswith(b"\n") and isinstance(e, msgspec.DecodeError):
            reason = f"truncated ({reason})"
        return BadLine(number, reason)
    return Line(number, record, time_ns)


def read_bundle(lines: Iterable[bytes | str]) -> Iterator[Line | BadLine]:
    """Every line of a bundle in file order, blank lines skipped (a file opened in binary mode or a
    list of strings)."""
    for number, raw in enumerate(lines, start=1):
        line = read_line(number, raw)
        if line is not None:
            yield line


def sorted_entries(entries: Iterable[tuple[int, BundleEntry]]) -> list[BundleEntry]:
    """(time in ns, entry) pairs in bundle order."""
    return [record for time_ns, record in sorted(entries, key=lambda pair: order_key(pair[1], pair[0]))]
