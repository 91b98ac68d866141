"""What to do when LH_OBJECTS refuses an event because its subject's last message is not the one
the watcher expected ("wrong last sequence").

Every event goes out with `Nats-Expected-Last-Subject-Sequence` (see publishing.py), so the stream
stores it only on top of the message the watcher last saw stored for that object. A refusal means
something else was stored there meanwhile, or the watcher did not know what was there:

* its own event, whose ack was lost (a re-send after a reconnect): nothing to publish again;
* a newer state of the object, published by another watcher replica: ours is superseded, but only
  once the API server vouches for that state (`overrule`): anyone holding the watcher's NATS
  credentials can store an event claiming any resourceVersion, and one far ahead would otherwise
  supersede every real event of the object for good. The API server is the truth, the stream a
  copy: a stored state newer than anything the API server has for the object is contradicted, and
  ours goes on top of it;
* an older state: a frame the watcher had sent to a server that froze and processed it late,
  a tombstone's sequence the watcher forgot, or a stream the watcher never read (it started
  without bootstrap): ours must go on top of it, expecting that message's sequence.

"Newer" compares resourceVersions as integers, as the decision kit does (corral_decision.base):
the API server's resourceVersion is etcd's global revision, so a later state of any object carries
a larger one. Pure, so the rules are unit-tested on their own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import msgspec


class Verdict(enum.Enum):
    STORED = "stored"
    """The stream's last message is ours: settle it as stored."""
    SUPERSEDED = "superseded"
    """The stream's last message is a newer state: drop ours."""
    REPUBLISH = "republish"
    """The stream's last message is older (or there is none): publish ours on top of it."""
    CONTRADICTED = "contradicted"
    """The stream's last message claims a state newer than the API server has: a forgery (or a
    stream left over from another cluster). Publish ours on top of it, and report it."""


@dataclass(frozen=True, slots=True)
class LastMessage:
    """The last message stored on a subject, as far as the decision needs it."""

    seq: int
    msg_id: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Resolution:
    verdict: Verdict
    seq: int
    """The sequence of the subject's last stored message (0: none): the next expectation."""


class _Version(msgspec.Struct, rename="camel"):
    resource_version: str = ""


_version = msgspec.json.Decoder(_Version)


def resource_version(payload: bytes) -> int | None:
    """The event's resourceVersion as an integer; None when there is none or it is not a number."""
    try:
        text = _version.decode(payload).resource_version
    except Exception:  # not JSON, or invalid UTF-8: a message we cannot date
        return None
    return int(text) if text.isdigit() else None


def resolve(msg_id: str, payload: bytes, last: LastMessage | None) -> Resolution:
    """The verdict on our refused event (`msg_id`, `payload`) given the subject's `last` message."""
    if last is None:
        return Resolution(Verdict.REPUBLISH, 0)
    if last.msg_id == msg_id:
        return Resolution(Verdict.STORED, last.seq)
    ours, stored = resource_version(payload), resource_version(last.data)
    if ours is not None and stored is not None and stored > ours:
        return Resolution(Verdict.SUPERSEDED, last.seq)
    # Older, or not comparable (a server's marker without payload): the watcher's newest view wins.
    return Resolution(Verdict.REPUBLISH, last.seq)


def overrule(resolution: Resolution, last: LastMessage | None, truth: int) -> Resolution:
    """The verdict once the API server has answered: `truth` is the newest resourceVersion it
    vouches for concerning the object (the object's own, or its list's when the object is gone). A
    stored state beyond it never existed, so it cannot supersede ours."""
    if resolution.verdict is not Verdict.SUPERSEDED or last is None:
        return resolution
    stored = resource_version(last.data)
    if stored is not None and stored > truth:
        return Resolution(Verdict.CONTRADICTED, resolution.seq)
    return resolution
