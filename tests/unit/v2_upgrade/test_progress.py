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
from corral_v2_upgrade.progress import ProgressModel
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
    model.clock = lambda: since + 5
    assert model.complete and not model.finished()
    rows = {r.node: (r.in_flight, r.done, r.waiting, dict(r.blocked)) for r in model.groups()}
    blocker = "volume pvc-x has only 1 replica, which is not supported for live upgrade"
    assert rows == {"node-1": (0, 1, 0, {}), "node-2": (0, 0, 0, {blocker: 1}), "node-3": (0, 0, 0, {})}
    assert model.heading() == "v2-upgrade upgrade: upgrading 1/3; upgrading node-2 (initializing for 5s)"
    out = io.StringIO()
    LineView(out).update(model, 1.0)
    assert f"blocked 1 ({blocker} 1)" in out.getvalue()


def test_finished_once_the_manager_is() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    world.run()
    model = model_of(world)
    assert model.finished() and model.total().done == 1
