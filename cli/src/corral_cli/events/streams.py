"""Which stream holds which subjects, and the facts JetStream puts on a delivered message.

`corral events` takes NATS subject filters (`--subjects lh.obj.volume.> lh.res.engine-upgrade.>`)
and reads each from the stream of the bus contract that stores it (DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from corral_model.subjects import (
    COMMANDS_PREFIX,
    COMMANDS_STREAM,
    DEAD_PREFIX,
    DEAD_STREAM,
    OBJECTS_PREFIX,
    OBJECTS_STREAM,
    RESULTS_PREFIX,
    RESULTS_STREAM,
)

DEFAULT_SUBJECTS = (f"{OBJECTS_PREFIX}.>", f"{COMMANDS_PREFIX}.>", f"{RESULTS_PREFIX}.>")
_BY_PREFIX = {
    OBJECTS_PREFIX: OBJECTS_STREAM,
    COMMANDS_PREFIX: COMMANDS_STREAM,
    RESULTS_PREFIX: RESULTS_STREAM,
    DEAD_PREFIX: DEAD_STREAM,
}
STREAM_ORDER = (OBJECTS_STREAM, COMMANDS_STREAM, RESULTS_STREAM, DEAD_STREAM)


def stream_of(subject: str) -> str:
    """The contract stream storing `subject` (a filter such as `lh.obj.volume.>` or `lh.>`-free);
    ValueError for anything else."""
    for prefix, stream in _BY_PREFIX.items():
        if subject == f"{prefix}.>" or subject.startswith(prefix + "."):
            return stream
    raise ValueError(f"{subject!r} is in no corral stream (lh.obj.…, lh.cmd.…, lh.res.…, lh.dead.…)")


def filters_by_stream(subjects: Iterable[str]) -> dict[str, list[str]]:
    """Subject filters grouped by stream, streams in contract order, duplicates dropped."""
    grouped: dict[str, list[str]] = {}
    for subject in subjects:
        filters = grouped.setdefault(stream_of(subject), [])
        if subject not in filters:
            filters.append(subject)
    return {stream: grouped[stream] for stream in STREAM_ORDER if stream in grouped}


def delivery_facts(reply: str) -> tuple[int, int, int]:
    """(stream sequence, store time in ns, messages pending) from a JetStream delivery's reply
    subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>`, or the form
    with domain and account hash). nats-py's `Msg.metadata` rounds the time to a float."""
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[:2] == ["$JS", "ACK"]:
        return int(tokens[5]), int(tokens[7]), int(tokens[8])
    if len(tokens) >= 11 and tokens[:2] == ["$JS", "ACK"]:
        return int(tokens[7]), int(tokens[9]), int(tokens[10])
    raise ValueError(f"not a JetStream delivery: reply subject {reply!r}")
