"""How a DELETED event replaces an object's history on LH_OBJECTS without a rollup.

A deleted object's subject must end up empty: its tombstone expires after a TTL, and if older
events of the object were still stored under it, the last of them would become the subject's last
message again, and every consumer bootstrapping (deliver-last-per-subject) would see the object
alive. A `Nats-Rollup: sub` header used to drop them, but LH_OBJECTS refuses rollups: the server
cannot tell a tombstone's rollup from a forged `Nats-Rollup: all`, which empties the whole stream.

What the stream does allow is its own per-subject limit: it keeps the last `max_msgs_per_subject`
messages of a subject and discards the oldest. So a tombstone goes out that many times (copies
under their own `Nats-Msg-Id`, same payload and TTL): the copies push every older event of the
object out, and all of them expire together. A consumer following the stream sees the same
DELETED a few times, which a level-triggered view takes as the no-op it is. Deletions are rare
next to changes, so the extra messages cost little.

Pure, so it is unit-tested on its own.
"""

from __future__ import annotations

from corral_watcher.events import Message

TOMBSTONE_MARK = ":deleted"
"""In the `Nats-Msg-Id` of a tombstone and of each of its copies (corral_watcher.events)."""


def is_tombstone(msg_id: str) -> bool:
    return TOMBSTONE_MARK in msg_id


def copies(tombstone: Message, history: int) -> list[Message]:
    """The further messages that make `tombstone` fill a subject that keeps `history` messages."""
    subject, payload, msg_id, headers = tombstone
    return [(subject, payload, f"{msg_id}.{n}", headers) for n in range(2, history + 1)]
