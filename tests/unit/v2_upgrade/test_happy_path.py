"""The whole upgrade on a small in-process cluster (V2U-04, V2U-05, V2U-15): every node passes
through every step in order, one node at a time, the v2 IMs end on the new image, and v1 replicas
and instance managers are never touched."""

from __future__ import annotations

from corral_model.envelopes import Verb
from corral_v2_upgrade.states import NODE_STEPS, UpgradeState
from tests.unit.v2_upgrade.world import NEW, V1_IM, World, cluster, manager, replica, volume

S = UpgradeState


def run(world: World, limit: int = 200, restart: bool = False) -> list[dict[str, str]]:
    """Step until the manager is terminal; returns the node upgrades' states at every observation."""
    seen: list[dict[str, str]] = []
    for _ in range(limit):
        world.step(restart=restart)
        observed = {u.metadata.name: u.status.state for u in world.all("nodedataengineupgrade")}
        seen.append(observed)
        check_one_in_flight(world)
        if world.get("dataengineupgrademanager", "upgrade").status.state in ("completed", "error"):
            return seen
    raise AssertionError(
        f"not finished after {limit} passes: {world.get('dataengineupgrademanager', 'upgrade').status}"
    )


def check_one_in_flight(world: World) -> None:
    busy = [u for u in world.all("nodedataengineupgrade") if u.status.state not in ("completed", "error")]
    assert len(busy) <= 1, [u.metadata.name for u in busy]
    upgrading = world.get("dataengineupgrademanager", "upgrade").status.upgrading_node
    if busy and upgrading:
        assert busy[0].spec.node_id == upgrading
    if upgrading:
        assert len(busy) <= 1


def three_nodes() -> World:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-1", "vol-c": "node-2"})
    # A v1 volume with replicas on every node: never touched.
    world.put(*volume("vol-v1", "node-1", engine="v1", image="longhornio/longhorn-engine:v1.9.0"))
    for node in ("node-1", "node-2", "node-3"):
        world.put(replica("vol-v1", node, engine="v1"))
    world.put(manager())
    world.start()
    return world


def test_every_node_passes_every_step_in_order_one_at_a_time() -> None:
    world = three_nodes()
    v1_before = {
        (o.metadata.name, o.metadata.uid)
        for o in world.all("replica") + world.all("instancemanager")
        if o.spec.data_engine == "v1"
    }
    seen = run(world)
    done = world.get("dataengineupgrademanager", "upgrade")
    assert done.status.state == S.COMPLETED
    assert {n: e.state for n, e in done.status.upgrade_nodes.items()} == {
        "node-1": "completed",
        "node-2": "completed",
        "node-3": "completed",
    }
    assert done.status.message == "3 of 3 nodes upgraded"
    names = sorted({n for obs in seen for n in obs})
    assert [world.get("nodedataengineupgrade", n).spec.node_id for n in names] == [
        "node-1",
        "node-2",
        "node-3",
    ]
    for name in names:
        states = [obs[name] for obs in seen if name in obs]
        order = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
        assert order == [*NODE_STEPS, S.COMPLETED]
    v2 = [im for im in world.all("instancemanager") if im.spec.data_engine == "v2"]
    assert {im.spec.image for im in v2} == {NEW} and len(v2) == 3
    for vol in ("vol-a", "vol-b", "vol-c"):
        v = world.get("volume", vol)
        assert (v.spec.image, v.status.current_image, v.spec.target_node_id_for_live_upgrade) == (
            NEW,
            NEW,
            "",
        )
        assert v.status.state == "attached" and v.status.robustness == "healthy"
    # v1: the same objects (uids), and no command ever addressed one.
    v1_after = {
        (o.metadata.name, o.metadata.uid)
        for o in world.all("replica") + world.all("instancemanager")
        if o.spec.data_engine == "v1"
    }
    assert v1_after == v1_before
    v1_names = {n for n, _ in v1_before} | {"vol-v1"}
    assert not [c for c in world.applied + world.refused if c.target.name in v1_names]
    assert V1_IM in {im.spec.image for im in world.all("instancemanager")}


def test_a_decider_restarted_before_every_pass_does_the_same_with_no_duplicate() -> None:
    world = three_nodes()
    run(world, restart=True)
    assert world.get("dataengineupgrademanager", "upgrade").status.state == S.COMPLETED
    creates = [c.target.name for c in world.applied if c.verb is Verb.CREATE]
    assert len(creates) == len(set(creates)) == 3
    im_deletes = [
        c.target.name for c in world.applied if c.verb is Verb.DELETE and c.target.kind == "InstanceManager"
    ]
    assert len(im_deletes) == len(set(im_deletes)) == 3
