"""The actuator's informer of the volumes: its own writes count at once, older watch events cannot
hide them, and the upgrades in flight are indexed by owner node."""

from __future__ import annotations

from typing import Any

import msgspec

from corral_actuator.volume_facts import VolumeInformer
from corral_model import longhorn as lh

OLD, NEW = "engine:v1", "engine:v2"


def _volume(name: str, rv: int, *, image: str = OLD, current: str = OLD, owner: str = "node-1") -> lh.Volume:
    document: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
        "spec": {"image": image},
        "status": {"currentImage": current, "ownerID": owner, "state": "detached"},
    }
    return msgspec.convert(document, lh.Volume)


def _informer() -> VolumeInformer:
    return VolumeInformer(None, "ns")  # type: ignore[arg-type]  # nothing here talks to the API


def test_in_flight_is_indexed_by_owner_and_follows_the_volume() -> None:
    informer = _informer()
    informer.observe(_volume("a", 10, image=NEW))
    informer.observe(_volume("b", 11))
    informer.observe(_volume("c", 12, image=NEW, owner="node-2"))
    assert informer.in_flight("node-1") == {"a"} and informer.in_flight("node-2") == {"c"}
    informer.observe(_volume("a", 13, image=NEW, current=NEW))  # the upgrade finished
    informer.observe(_volume("c", 14, image=NEW, owner="node-1"))  # the owner moved
    assert informer.in_flight("node-1") == {"c"} and informer.in_flight("node-2") == set()


def test_an_older_event_cannot_hide_the_actuators_own_write() -> None:
    informer = _informer()
    before = _volume("a", 10)
    informer.observe(before)
    informer.written(before, NEW, "20")
    assert informer.in_flight("node-1") == {"a"}
    informer.observe(_volume("a", 15))  # the watch, behind our write, still shows the old image
    assert informer.in_flight("node-1") == {"a"}
    volume = informer.get("a")
    assert volume is not None and volume.metadata.resource_version == "20"
    informer.observe(_volume("a", 20, image=NEW))  # the watch catches up: our write as stored
    informer.observe(_volume("a", 25, image=NEW, current=NEW))  # and then the upgrade is done
    assert informer.in_flight("node-1") == set()
