"""A window of the bus's own history (LH_HISTORY, corral_bus.history) as bundle lines: what
`corral replay <service> --nats … --since T` replays and `corral events dump --since T` writes.

The lines are the window from T to `until`, after what rebuilds the decider's state as of T: each
object's latest event before T - CONTEXT_S (where a restarted decider would bootstrap from), then
every event, command and result of the CONTEXT_S before T whole, so the commands still in flight at
T, their results and the back-offs of refused ones are known as the live decider knew them. A replay
decides all of it and compares only the window (corral_decision.replay, `since_ns`). Without T, the
lines are the whole history.

Each line is the message as it was first stored: its subject (a republished command's `lh.hist.` prefix
taken off), the stream that stored it (by subject: `lh.obj.…` is LH_OBJECTS however many command
streams there are), its sequence there (from the headers JetStream adds to a copy, which are
dropped from the line), and the history's store time.

Objects that did not change during the whole history have no event in it. Their state held all
along, so their latest event in LH_OBJECTS (older than the history's first message) is put first,
as the start of the view (so is any object the history somehow lacks, at its own time). What is
older than the history cannot be replayed, and `limits` says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from nats.js.api import StreamInfo
from nats.js.errors import NotFoundError

from corral_bus import Bus
from corral_cli.events.reader import ReadError, consume
from corral_cli.events.streams import DEFAULT_SUBJECTS, stream_of
from corral_decision.bundle import BundleEntry, format_time, sorted_entries
from corral_model.subjects import (
    HISTORY_PREFIX,
    HISTORY_STREAM,
    OBJECTS_PREFIX,
    OBJECTS_STREAM,
    subject_matches,
)

SOURCE_HEADER = "Nats-Stream-Source"
REPUBLISH_HEADERS = ("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Last-Sequence")
CATCH_UP_S = 2.0
CONTEXT_S = 900.0
"""15 minutes: far longer than any decider's retry back-off (engine-upgrade: 120 s) or the
actuator's wait for a command, so every command in flight at T is in the context whole."""


@dataclass
class HistoryWindow:
    """The lines of a window and what the history could not hold of it."""

    entries: list[BundleEntry] = field(default_factory=list)
    first_ns: int | None = None
    """Store time of the history's first message (None: the history is empty)."""
    expired: bool = False
    """Older messages went (the history's age or size limit): it does not begin with the bus."""
    seeded: int = 0
    """Objects taken from LH_OBJECTS, unchanged during the whole history."""
    since_ns: int | None = None
    until_ns: int | None = None

    def limits(self) -> list[str]:
        """What a replay of this window cannot reproduce, in words (empty: nothing)."""
        out: list[str] = []
        if self.first_ns is None:
            return ["the history (LH_HISTORY) is empty: there is nothing to replay"]
        starts = format_time(self.first_ns)
        if self.since_ns is not None and self.since_ns < self.first_ns and self.expired:
            out.append(
                f"the window starts at {format_time(self.since_ns)}, before the history: LH_HISTORY"
                f" holds messages from {starts} (older messages expired (its max age or size));"
                " decisions before then cannot be replayed or compared, and the view at its start is"
                " each object's latest event before it"
            )
        elif self.since_ns is not None and self.since_ns < self.first_ns:
            out.append(
                f"the window starts at {format_time(self.since_ns)}, before the history's first message"
                f" ({starts}); nothing has expired from it since, so it is whole from there (what came"
                " before the history was made was never recorded)"
            )
        elif self.expired and self.since_ns is None:
            out.append(
                f"LH_HISTORY holds messages from {starts} on (older ones expired): decisions before"
                " then cannot be replayed, and right after it the view may lack what came before"
            )
        if self.seeded:
            out.append(
                f"{self.seeded} objects did not change during the history: their view starts from"
                " their latest event in LH_OBJECTS"
            )
        return out


async def _caught_up(bus: Bus, info: StreamInfo) -> StreamInfo:
    """JetStream copies a message into the history a moment after its origin stored it: wait (at
    most CATCH_UP_S) until no source lags, so what was just published is in the window."""
    deadline = time.monotonic() + CATCH_UP_S
    while any(source.lag for source in info.sources or []) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        info = await bus.js.stream_info(HISTORY_STREAM)
    return info


async def has_history(bus: Bus) -> bool:
    try:
        await bus.js.stream_info(HISTORY_STREAM)
    except NotFoundError:
        return False
    return True


def _origin(record: BundleEntry) -> BundleEntry:
    """The line as its origin stream stored it (subject, stream, sequence), at the history's time."""
    headers = dict(record.headers)
    source = headers.pop(SOURCE_HEADER, "").split(" ")
    seq = int(source[1]) if len(source) > 1 and source[1].isdigit() else record.seq
    subject = record.subject
    if subject.startswith(HISTORY_PREFIX + "."):  # republished by a work-queue stream
        subject = headers.get("Nats-Subject") or subject.removeprefix(HISTORY_PREFIX + ".")
        republished_seq = headers.get("Nats-Sequence", "")
        seq = int(republished_seq) if republished_seq.isdigit() else seq
        for name in REPUBLISH_HEADERS:
            headers.pop(name, None)
    return BundleEntry(
        stream=stream_of(subject),
        seq=seq,
        time=record.time,
        subject=subject,
        headers=headers,
        payload=record.payload,
        base64=record.base64,
    )


async def read_history(
    bus: Bus,
    *,
    since_ns: int | None = None,
    until_ns: int | None = None,
    subjects: Sequence[str] = DEFAULT_SUBJECTS,
) -> HistoryWindow:
    """The history up to `until_ns` (from its first message), and the objects it never saw."""
    try:
        info = await bus.js.stream_info(HISTORY_STREAM)
    except NotFoundError as e:
        raise ReadError(
            f"no stream {HISTORY_STREAM} on this bus: run the setup step (`corral bus init`) to create it"
        ) from e
    info = await _caught_up(bus, info)
    window = HistoryWindow(since_ns=since_ns, until_ns=until_ns, expired=info.state.first_seq > 1)
    pairs: list[tuple[int, BundleEntry]] = []
    seen: set[str] = set()
    cut = None if since_ns is None else since_ns - int(CONTEXT_S * 1e9)
    latest: dict[str, tuple[int, BundleEntry]] = {}  # per object, before the cut
    if info.state.messages:
        async for time_ns, copy in consume(bus, HISTORY_STREAM, []):
            window.first_ns = time_ns if window.first_ns is None else window.first_ns
            if until_ns is not None and time_ns > until_ns:
                break  # the history is in time order: nothing later belongs to the window
            record = _origin(copy)
            if not any(subject_matches(f, record.subject) for f in subjects):
                continue
            seen.add(record.subject)
            if cut is not None and time_ns < cut:
                if record.subject.startswith(OBJECTS_PREFIX + "."):
                    latest[record.subject] = (time_ns, record)
            else:
                pairs.append((time_ns, record))
    pairs += latest.values()
    objects = [s for s in subjects if s.startswith(OBJECTS_PREFIX + ".")]
    if objects:
        async for time_ns, record in consume(bus, OBJECTS_STREAM, objects, last_per_subject=True):
            if record.subject not in seen and (until_ns is None or time_ns <= until_ns):
                pairs.append((time_ns, record))
                window.seeded += 1
    window.entries = sorted_entries(pairs)
    return window
