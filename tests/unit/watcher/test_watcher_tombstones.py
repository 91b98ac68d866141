"""A tombstone and its copies fill a subject's history (corral_watcher.tombstones)."""

from __future__ import annotations

from corral_bus import tombstone_headers
from corral_watcher.tombstones import copies, is_tombstone


def test_copies_fill_the_history_under_their_own_ids() -> None:
    headers = tombstone_headers(60)
    tombstone = ("lh.obj.volume.ns.v", b"DELETED", "volume:u1:5:deleted", headers)
    assert copies(tombstone, 3) == [
        ("lh.obj.volume.ns.v", b"DELETED", "volume:u1:5:deleted.2", headers),
        ("lh.obj.volume.ns.v", b"DELETED", "volume:u1:5:deleted.3", headers),
    ]
    assert copies(tombstone, 1) == []
    assert all(is_tombstone(msg_id) for _, _, msg_id, _ in copies(tombstone, 5))
    assert not is_tombstone("volume:u1:5")


def test_a_tombstone_carries_no_rollup() -> None:
    assert "Nats-Rollup" not in tombstone_headers(60)
