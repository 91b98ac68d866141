"""Which waiting volumes an owner node's free slots take first: live upgrades before offline ones.

A wave is, per owner node, a set of upgrades run on `limit` slots, and its length (makespan) is
what an operator waits for. For known durations, starting the longest upgrades first (LPT) is
within 4/3 of the shortest possible makespan and usually within a few percent of it, while
starting them in name order can leave a long upgrade for the end, with the other slots idle beside
it. corral cannot know how long an upgrade will take, but it knows which kind each one will be, and
the kind fixes most of it (longhorn-behaviour.md §1.3, §1.5):

* an **attached** volume upgrades live: the volume controller starts a new replica process per
  replica and a new engine on the new image, then swaps them in (seconds, tens with many
  replicas);
* a **detached** volume upgrades offline: the volume controller only rewrites the images of the
  engine and replicas, no process runs (close to instant).

So live upgrades are expected longest and go first; within a rank, by (namespace, name) as before
(deterministic, so plans are reproducible and tests exact). `spec.size` is deliberately not a key:
neither upgrade copies data (a live upgrade reopens the same replica files), so size says little
about duration, and it would cost every volume record a field.

The rank is read from `status.state` as the view holds it; a volume that attaches or detaches
while waiting moves in its owner's order (slots.py).
"""

from __future__ import annotations

from corral_engine_upgrade.records import FILED_LIVE, VolumeRecord

LIVE, OFFLINE = 0, 1


def rank(volume: VolumeRecord) -> int:
    """LIVE for an attached volume (a live upgrade: the long kind), OFFLINE for any other state."""
    return LIVE if volume.state == "attached" else OFFLINE


def filed_at_rank(volume: VolumeRecord) -> bool:
    """It is filed in its owner's members under the rank it has now (`member_rank == rank`):
    one test of its flags, for the per-event paths, where two Python calls would show."""
    filed_live = volume.flags & FILED_LIVE
    return filed_live != 0 if volume.state == "attached" else filed_live == 0
