"""Property tests: random clusters, random event orders with duplicates, delays and reorderings,
random refusals. At every step no owner node has more upgrades in flight (in the true cluster,
plus commands on their way that would still apply) than the limit; once the churn stops, every
volume the rules allow is upgraded."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral_decision import Timing
from corral_engine_upgrade.core import DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import KEY, STRIDE, replica_name, replica_nodes
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING, REQUIRED_KINDS
from corral_engine_upgrade.wave_guard import WAVE_GUARD_OFF
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NODES,
    NS,
    OLD,
    Clock,
    engine_image,
    longhorn_node,
    replica,
    setting,
    volume,
)
from tests.unit.engine_upgrade.sim import KINDS, MAX_LAG, SimCluster

# The wave guard off: the random faults here would pause the wave (as they should), and these
# properties are about the limit and about every eligible volume getting upgraded.
CONFIG = DeciderConfig(
    timing=Timing(command_ttl=3 * MAX_LAG, applied_ttl=600, retry_backoff=30), wave_guard=WAVE_GUARD_OFF
)
WANTS_UPGRADE = {
    Reason.IN_PROGRESS,
    Reason.COMMAND_PENDING,
    Reason.RETRY_BACKOFF,
    Reason.NODE_LIMIT_REACHED,
    Reason.AWAITING_DECISION,
}


@st.composite
def volumes(draw: st.DrawFn) -> list[tuple[lh.Volume, tuple[str, ...]]]:
    count = draw(st.integers(1, 12))
    out = []
    for i in range(count):
        state = draw(st.sampled_from(["attached", "attached", "detached", "attaching"]))
        image = draw(st.sampled_from([OLD, OLD, OLD, NEW]))
        current = draw(st.sampled_from([image, image, image, OLD if image == NEW else NEW]))
        vol = volume(
            f"v{i:02d}",
            owner=draw(st.sampled_from(["n1", "n1", "n2", "n3"])),  # a hot node: contention
            state=state,
            robustness=draw(st.sampled_from(["healthy", "healthy", "degraded"])),
            image=image,
            current=current,
            data_engine=draw(st.sampled_from(["v1", "v1", "v1", "v2"])),
        )
        nodes = tuple(draw(st.lists(st.sampled_from(NODES), min_size=0, max_size=3)))
        out.append((vol, nodes))
    return out


def start(data: st.DataObject) -> SimCluster:
    clock = Clock()
    decider = EngineUpgradeDecider(clock, CONFIG)
    sim = SimCluster(clock, decider)
    sim.limit = data.draw(st.integers(1, 3), label="limit")
    for node in NODES:
        sim.write(longhorn_node(node))
    new_nodes = data.draw(st.sampled_from([None, {"n1": True, "n2": True, "n3": False}]), label="new EI")
    sim.write(engine_image(OLD, api=5))
    sim.write(engine_image(NEW, nodes=new_nodes))
    sim.write(setting(DEFAULT_IMAGE_SETTING, NEW))
    sim.write(setting(LIMIT_SETTING, str(sim.limit)))
    in_flight: dict[str, int] = {}
    for vol, nodes in data.draw(volumes(), label="volumes"):
        if vol.spec.image != vol.status.current_image:
            owner = vol.status.owner_id
            if in_flight.get(owner, 0) >= sim.limit:  # start within the limit; lowering it is AEU-05
                vol = msgspec.structs.replace(
                    vol, status=msgspec.structs.replace(vol.status, current_image=vol.spec.image)
                )
            in_flight[owner] = in_flight.get(owner, 0) + 1
        sim.write(vol)
        for i, node in enumerate(nodes):
            sim.write(replica(vol.metadata.name, i, node))
    sim.resync(REQUIRED_KINDS)
    return sim


def check_limit(sim: SimCluster) -> None:
    for node, count in sim.potential_in_flight().items():
        assert count <= sim.limit, f"{node}: {count} in flight > limit {sim.limit}"


def churn(sim: SimCluster, data: st.DataObject) -> None:
    """Something unrelated to us changes a volume: health, attachment, or a deletion."""
    if not sim.volumes:
        return
    name = data.draw(st.sampled_from(sorted(sim.volumes)))
    vol = sim.volumes[name]
    change = data.draw(st.sampled_from(["robustness", "state", "touch", "delete"]))
    if change == "delete":
        sim.write(vol, EventType.DELETED)
        return
    status = vol.status
    if change == "robustness":
        status = msgspec.structs.replace(
            status, robustness="degraded" if status.robustness == "healthy" else "healthy"
        )
    elif change == "state":
        attached = status.state != "attached"
        status = msgspec.structs.replace(
            status,
            state="attached" if attached else "detached",
            current_node_id=status.owner_id if attached else "",
            robustness="healthy" if attached else "unknown",
        )
    sim.write(msgspec.structs.replace(vol, status=status))


def step(sim: SimCluster, data: st.DataObject, allow_churn: bool) -> None:
    actions = ["event", "event", "event", "decide", "decide", "actuate", "result", "finish", "tick"]
    if allow_churn:
        actions += ["churn", "churn", "churn", "raise-limit"]
    action = data.draw(st.sampled_from(actions))
    if action == "event" and sim.events:
        index = data.draw(st.integers(0, len(sim.events) - 1))
        sim.deliver_event(index, duplicate=data.draw(st.booleans()))
    elif action == "decide":
        sim.decide()
    elif action == "actuate" and sim.commands:
        index = data.draw(st.integers(0, len(sim.commands) - 1))
        sim.actuate(index, spurious_failure=allow_churn and data.draw(st.booleans()))
    elif action == "result" and sim.results:
        sim.deliver_result(data.draw(st.integers(0, len(sim.results) - 1)))
    elif action == "finish":
        upgrading = sorted(n for n, v in sim.volumes.items() if v.spec.image != v.status.current_image)
        if upgrading:
            sim.finish_upgrade(data.draw(st.sampled_from(upgrading)))
    elif action == "tick":
        sim.tick(data.draw(st.sampled_from([1.0, 5.0, 15.0])))
    elif action == "churn":
        churn(sim, data)
    elif action == "raise-limit" and sim.limit < 3 and data.draw(st.integers(0, 5)) == 0:
        sim.limit += 1  # rarely: a high limit leaves nothing to contend for
        sim.write(setting(LIMIT_SETTING, str(sim.limit)))


def settle(sim: SimCluster) -> None:
    """No more churn: deliver everything, actuate everything, finish upgrades, until quiet."""
    for _ in range(500):
        sim.tick(MAX_LAG + 31)  # flushes events and results, passes any retry backoff
        issued = sim.decide()
        while sim.commands:
            sim.actuate(0, spurious_failure=False)
        sim.tick(MAX_LAG + 1)
        upgrading = sorted(n for n, v in sim.volumes.items() if v.spec.image != v.status.current_image)
        for name in upgrading:
            sim.finish_upgrade(name)
        sim.tick(MAX_LAG + 1)
        check_limit(sim)
        quiet = not (issued or upgrading or sim.events or sim.results)
        if quiet and sim.decider.pending_commands() == 0 and sim.decider.next_due() is None:
            return
    raise AssertionError("the cluster never settled")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_limit_holds_at_every_step_and_every_eligible_volume_is_upgraded(data: st.DataObject) -> None:
    sim = start(data)
    for _ in range(data.draw(st.integers(0, 200), label="steps")):
        step(sim, data, allow_churn=True)
        check_limit(sim)
    settle(sim)
    check_limit(sim)
    # Oracle: a fresh decider bootstrapped from the final true state finds nothing left to do.
    fresh = EngineUpgradeDecider(Clock(sim.clock.now), CONFIG)
    for transit in _replay(sim):
        fresh.apply(transit)
    assert fresh.decide() == []
    left = {e.name: e.reason for e in fresh.explain() if e.reason in WANTS_UPGRADE}
    assert left == {}
    # …and the live decider agrees with it, volume by volume.
    assert {e.name: e.reason for e in sim.decider.explain()} == {e.name: e.reason for e in fresh.explain()}


def _replay(sim: SimCluster) -> list[ObjectEvent[Any]]:
    """The final true state as a fresh bootstrap: every object once, then RESYNCED."""
    view_new = sim.decider.view.default_engine_image  # the NEW image as the live decider saw it
    assert view_new is not None
    objects: list[Any] = [longhorn_node(n) for n in NODES]
    objects += [
        engine_image(OLD, api=5),
        engine_image(NEW, nodes={n: n in view_new.ready_nodes for n in NODES}),
    ]
    objects += [setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, str(sim.limit))]
    for vol in sim.volumes.values():
        objects.append(vol)
        record = sim.decider.view.volume(NS, vol.metadata.name)
        assert record is not None
        items = record.replicas
        objects += [
            lh.Replica(
                metadata=lh.ObjectMeta(name=replica_name(vol.metadata.name, key), namespace=NS),
                spec=lh.ReplicaSpec(volume_name=vol.metadata.name, node_id=node),
            )
            for key, node in zip(items[KEY::STRIDE], replica_nodes(items), strict=True)
        ]
    events: list[ObjectEvent[Any]] = [
        ObjectEvent(type=EventType.ADDED, kind=KINDS[type(o)], namespace=NS, name=o.metadata.name, object=o)
        for o in objects
    ]
    events += [
        ObjectEvent(type=EventType.RESYNCED, kind=k, namespace=NS, name="") for k in sorted(REQUIRED_KINDS)
    ]
    return events
