"""`corral progress v2-upgrade`'s figures (the service's `DecisionService.progress`), from the same
events the service reads: per node its volumes done, in flight, waiting or blocked (with the
blocker its node upgrade reports), and a heading naming the node in flight and its step; drawn by
the CLI's line view."""

from __future__ import annotations

import io

import msgspec

from corral_cli.progress.render import LineView
from corral_model.envelopes import EventType, ObjectEvent
from corral_v2_upgrade.core import READS
from corral_v2_upgrade.progress import ProgressModel, held_for
from corral_v2_upgrade.step import parse_time
from tests.unit.v2_upgrade.world import World, cluster, manager, replica


def model_of(world: World) -> ProgressModel:
    model = ProgressModel()
    for (token, _), obj in sorted(world.objects.items()):
        if token in READS:
            model.apply(
                ObjectEvent(
                    type=EventType.ADDED,
                    kind=token,
                    namespace=obj.metadata.namespace,
                    name=obj.metadata.name,
                    object=obj,
                )
            )
    for token in sorted(READS):
        model.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace="longhorn-system", name=""))
    return model


def test_rows_per_node_and_the_blocker_of_the_node_in_flight() -> None:
    world = cluster(volumes={"vol-a": "node-1", "pvc-x": "node-2"})
    vol = world.get("volume", "pvc-x")
    world.put(msgspec.structs.replace(vol, spec=msgspec.structs.replace(vol.spec, number_of_replicas=1)))
    world.delete("replica", replica("pvc-x", "node-1").metadata.name)
    world.delete("replica", replica("pvc-x", "node-3").metadata.name)
    world.put(manager())
    world.start()
    for _ in range(40):  # node-1 goes through; node-2 is held by pvc-x
        world.step(tick=1.0)
    model = model_of(world)
    [upgrade] = world.node_upgrades("node-2")
    since = parse_time(upgrade.status.state_since)
    assert since is not None
    model.clock = lambda: since + 125
    assert model.complete and not model.finished()
    rows = {r.node: (r.in_flight, r.done, r.waiting, dict(r.blocked)) for r in model.groups()}
    blocker = "volume pvc-x has only 1 replica, which is not supported for live upgrade"
    assert rows == {"node-1": (0, 1, 0, {}), "node-2": (0, 0, 0, {blocker: 1}), "node-3": (0, 0, 0, {})}
    assert model.heading() == "v2-upgrade upgrade: upgrading 1/3; upgrading node-2 (initializing for 2m)"
    out = io.StringIO()
    LineView(out).update(model, 1.0)
    assert f"blocked 1 ({blocker} 1)" in out.getvalue()
    assert model.details() == [f"node-2  waiting: {blocker} (for 2m)"]  # no volume listed yet


def test_finished_once_the_manager_is() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    world.run()
    model = model_of(world)
    assert model.finished() and model.total().done == 1


def test_each_volume_of_the_node_in_flight_with_its_state_and_time_in_state() -> None:
    """The time in state is the volume's own (`status.volumes[v].since`, written with its state),
    not the node's: one volume stuck in switching-over shows how long, beside one already over."""
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-1"})
    world.stalled.add("vol-b")  # its switch-over never finishes
    world.put(manager())
    world.start()
    for _ in range(30):
        world.step(tick=1.0)
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.state == "switching-over"
    entries = upgrade.status.volumes
    assert entries["vol-a"].state == "switched-over" and entries["vol-b"].state == "switching-over"
    since_b = parse_time(entries["vol-b"].since)
    since_a = parse_time(entries["vol-a"].since)
    assert since_b is not None and since_a is not None and since_a > since_b
    model = model_of(world)
    model.clock = lambda: since_b + 3 * 60 + 59
    details = model.details()
    assert details[:2] == [
        f"node-1  vol-a  switched-over for {held_for(since_b + 239 - since_a)}",
        "node-1  vol-b  switching-over for 3m",
    ]
    assert details[2].startswith("node-1  waiting: volume vol-b is not switched over to node-")


def test_times_in_state_are_to_the_minute() -> None:
    assert [held_for(s) for s in (-3, 0, 59, 60, 3599, 3600, 3 * 3600 + 5 * 60)] == [
        "<1m",
        "<1m",
        "<1m",
        "1m",
        "59m",
        "1h00m",
        "3h05m",
    ]


def test_nothing_to_follow_without_a_manager() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    model = model_of(world)
    assert model.complete and model.finished()
    assert model.heading() == "v2-upgrade: no DataEngineUpgradeManager" and model.groups() == []
