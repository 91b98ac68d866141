"""The progress model: events in, per-owner-node figures out (in flight / done / waiting / blocked),
and the same judgement as the engine-upgrade service's `explain()` on every volume."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from corral_decision.progress import GroupFigures, Phase
from corral_engine_upgrade.core import EngineUpgradeDecider
from corral_engine_upgrade.progress import ProgressModel
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.stuck import StuckBounds
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING, REQUIRED_KINDS
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NODES,
    NS,
    OLD,
    engine_image,
    longhorn_node,
    replica,
    setting,
    upgraded,
    volume,
)

TOKENS: dict[type[Any], str] = {
    lh.Volume: "volume",
    lh.Replica: "replica",
    lh.EngineImage: "engineimage",
    lh.Setting: "setting",
    lh.Node: "node",
}


class Events:
    """ObjectEvents with a cluster-wide increasing resourceVersion, as the watcher publishes them."""

    def __init__(self) -> None:
        self.rv = 0
        self.log: list[ObjectEvent[Any]] = []

    def event(
        self, obj: Any, type_: EventType = EventType.MODIFIED, rv: int | None = None
    ) -> ObjectEvent[Any]:
        if rv is None:
            self.rv += 1
            rv = self.rv
        meta = msgspec.structs.replace(obj.metadata, resource_version=str(rv))
        event = ObjectEvent(
            type=type_,
            kind=TOKENS[type(obj)],
            namespace=obj.metadata.namespace,
            name=obj.metadata.name,
            resource_version=str(rv),
            object=msgspec.structs.replace(obj, metadata=meta),
        )
        self.log.append(event)
        return event

    def resync(self) -> list[ObjectEvent[Any]]:
        markers: list[ObjectEvent[Any]] = [
            ObjectEvent(type=EventType.RESYNCED, kind=k, namespace=NS, name="")
            for k in sorted(REQUIRED_KINDS)
        ]
        self.log.extend(markers)
        return markers


def cluster(model: ProgressModel, events: Events, *, default: str = NEW, limit: str = "2") -> None:
    for node in NODES:
        model.apply(events.event(longhorn_node(node)))
    model.apply(events.event(engine_image(OLD, api=5)))
    model.apply(events.event(engine_image(NEW)))
    model.apply(events.event(setting(DEFAULT_IMAGE_SETTING, default)))
    model.apply(events.event(setting(LIMIT_SETTING, limit)))
    model.apply_all(events.resync())


def put(model: ProgressModel, events: Events, *objs: Any) -> None:
    for obj in objs:
        model.apply(events.event(obj))


def with_replicas(vol: lh.Volume, nodes: tuple[str, ...] = NODES) -> list[Any]:
    return [vol, *(replica(vol.metadata.name, i, n) for i, n in enumerate(nodes))]


def row(model: ProgressModel, node: str) -> GroupFigures:
    [found] = [r for r in model.groups() if r.node == node]
    return found


def figures(r: GroupFigures) -> tuple[int, int, int, dict[str, int]]:
    return (r.in_flight, r.done, r.waiting, dict(r.blocked))


def test_nothing_is_judged_finished_before_every_kind_was_listed() -> None:
    model, events = ProgressModel(), Events()
    put(model, events, longhorn_node("n1"), *with_replicas(volume("a", image=NEW)))
    assert not model.complete and not model.finished()
    model.apply_all(events.resync())
    assert model.complete


def test_a_wave_in_figures_per_owner_node() -> None:
    model, events = ProgressModel(), Events()
    cluster(model, events)
    put(
        model,
        events,
        *with_replicas(volume("a", image=NEW, current=OLD)),  # n1: upgrading
        *with_replicas(volume("b")),  # n1: eligible, on OLD
        *with_replicas(volume("c", robustness="degraded")),  # n1: degraded
        *with_replicas(volume("d", image=NEW)),  # n1: done
        *with_replicas(volume("e", owner="n2", state="detached")),  # n2: offline candidate
        *with_replicas(volume("f", owner="n2", standby=True)),  # n2: DR volume
    )
    assert figures(row(model, "n1")) == (1, 1, 1, {"degraded": 1})
    assert figures(row(model, "n2")) == (0, 0, 1, {"dr-volume": 1})
    assert figures(row(model, "n3")) == (0, 0, 0, {})  # a Longhorn node without volumes still shows
    assert figures(model.total()) == (1, 1, 2, {"degraded": 1, "dr-volume": 1})
    assert model.limit == 2 and model.default_image == NEW
    assert not model.finished()

    put(model, events, upgraded(volume("a"), done=True), upgraded(volume("b")))
    assert figures(row(model, "n1")) == (1, 2, 0, {"degraded": 1})
    put(model, events, upgraded(volume("b"), done=True), upgraded(volume("e", owner="n2", state="detached")))
    put(model, events, upgraded(volume("e", owner="n2", state="detached"), done=True))
    assert figures(model.total()) == (0, 4, 0, {"degraded": 1, "dr-volume": 1})
    assert model.finished() and model.finished(NEW) and not model.finished("some/other:image")


def test_deleted_volumes_leave_the_figures_and_late_events_do_not_bring_them_back() -> None:
    model, events = ProgressModel(), Events()
    cluster(model, events)
    upgrading = volume("a", image=NEW, current=OLD)
    put(model, events, *with_replicas(upgrading), *with_replicas(volume("b")))
    stale = events.event(upgrading)  # an older event for `a`, delivered late
    model.apply(events.event(upgrading, EventType.DELETED))
    assert figures(row(model, "n1")) == (0, 0, 1, {})
    model.apply(stale)
    assert figures(row(model, "n1")) == (0, 0, 1, {})
    assert model.phase_of(NS, "a") is None
    model.apply(events.event(volume("b"), EventType.DELETED))
    assert figures(model.total()) == (0, 0, 0, {})


def test_owner_and_node_changes_move_volumes_between_rows() -> None:
    model, events = ProgressModel(), Events()
    cluster(model, events)
    put(model, events, *with_replicas(volume("a", image=NEW, current=OLD)))
    assert row(model, "n1").in_flight == 1
    # Longhorn hands the volume to another owner node (its node went down, it re-attached there)
    put(model, events, volume("a", owner="n2", image=NEW, current=OLD))
    assert (row(model, "n1").in_flight, row(model, "n2").in_flight) == (0, 1)
    # a Longhorn node that goes away loses its row once it owns nothing …
    model.apply(events.event(longhorn_node("n3"), EventType.DELETED))
    assert [r.node for r in model.groups()] == ["n1", "n2"]
    # … but a node that still owns volumes keeps it
    model.apply(events.event(longhorn_node("n2"), EventType.DELETED))
    assert row(model, "n2").in_flight == 1
    # and an owner that is no Longhorn node at all still gets a row
    put(model, events, volume("b", owner="edge-9", image=NEW))
    assert row(model, "edge-9").done == 1


def test_a_new_default_image_or_limit_rejudges_every_volume() -> None:
    model, events = ProgressModel(), Events()
    cluster(model, events, default=OLD)
    put(model, events, *with_replicas(volume("a")), *with_replicas(volume("b", owner="n2")))
    assert figures(model.total()) == (0, 2, 0, {})
    assert model.finished()  # no wave: every volume is on the default image
    put(model, events, setting(DEFAULT_IMAGE_SETTING, NEW))
    assert figures(model.total()) == (0, 0, 2, {})
    put(model, events, setting(LIMIT_SETTING, "0"))
    assert figures(model.total()) == (0, 0, 0, {"disabled": 2})
    assert model.finished()  # nothing will move while disabled: the view does not wait forever
    put(model, events, setting(LIMIT_SETTING, "1"))
    assert figures(model.total()) == (0, 0, 2, {})


def test_a_default_image_still_deploying_is_not_the_end_of_a_wave() -> None:
    model, events = ProgressModel(), Events()
    cluster(model, events, default=OLD)
    put(model, events, *with_replicas(volume("a")))
    newer = "longhornio/longhorn-engine:v1.11.0"
    put(model, events, engine_image(newer, state="deploying", nodes={"n1": True}))
    put(model, events, setting(DEFAULT_IMAGE_SETTING, newer))
    assert model.phase_of(NS, "a") == (Phase.BLOCKED, "default-image-not-ready")
    assert not model.finished()
    put(model, events, engine_image(newer))
    assert model.phase_of(NS, "a") == (Phase.WAITING, "")
    put(model, events, setting(DEFAULT_IMAGE_SETTING, "longhornio/longhorn-engine:nowhere"))
    assert model.phase_of(NS, "a") == (Phase.BLOCKED, "default-image-missing")
    assert not model.finished()


# --- the same judgement as the service's explain() ------------------------------------------------

VOLUME_SHAPES = st.fixed_dictionaries(
    {
        "owner": st.sampled_from(["n1", "n2", "n3", "gone"]),
        "state": st.sampled_from(["attached", "attached", "detached", "attaching"]),
        "robustness": st.sampled_from(["healthy", "healthy", "degraded", "faulted"]),
        "image": st.sampled_from([OLD, NEW]),
        "upgrading": st.booleans(),
        "standby": st.booleans(),
        "expansion_required": st.booleans(),
        "locality": st.sampled_from(["disabled", "strict-local"]),
        "data_engine": st.sampled_from(["v1", "v1", "v2"]),
        "replica_nodes": st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), max_size=3),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    shapes=st.lists(VOLUME_SHAPES, min_size=1, max_size=12),
    limit=st.sampled_from(["0", "1", "2", "x"]),
    default=st.sampled_from([NEW, OLD, "", "longhornio/longhorn-engine:missing"]),
    new_nodes=st.sets(st.sampled_from(["n1", "n2", "n3", "n4"])),
)
def test_every_volume_is_judged_as_the_service_explains_it(
    shapes: list[dict[str, Any]], limit: str, default: str, new_nodes: set[str]
) -> None:
    events = Events()
    objs: list[Any] = [longhorn_node(n) for n in NODES]
    objs += [engine_image(OLD, api=5), engine_image(NEW, nodes={n: True for n in new_nodes})]
    objs += [setting(DEFAULT_IMAGE_SETTING, default), setting(LIMIT_SETTING, limit)]
    for i, shape in enumerate(shapes):
        target = NEW if shape["image"] == OLD else OLD
        vol = volume(
            f"v{i}",
            owner=shape["owner"],
            state=shape["state"],
            robustness=shape["robustness"],
            image=target if shape["upgrading"] else shape["image"],
            current=shape["image"],
            standby=shape["standby"],
            expansion_required=shape["expansion_required"],
            locality=shape["locality"],
            data_engine=shape["data_engine"],
        )
        objs += [vol, *(replica(f"v{i}", j, n) for j, n in enumerate(shape["replica_nodes"]))]
    for obj in objs:
        events.event(obj)
    events.resync()

    model = ProgressModel(clock=lambda: 1000.0)
    model.apply_all(events.log)
    decider = EngineUpgradeDecider(clock=lambda: 1000.0)
    decider.apply_all(events.log)
    explained = {e.name: e for e in decider.explain()}
    on_default = {
        f"v{i}"
        for i, shape in enumerate(shapes)
        if default and not shape["upgrading"] and shape["image"] == default
    }
    assert set(explained) == {f"v{i}" for i in range(len(shapes))}  # nothing decided: all explained
    for name, explanation in explained.items():
        phase, reason = model.phase_of(NS, name) or (None, "")
        per_volume = explanation.detail or explanation.reason
        if per_volume == Reason.IN_PROGRESS:
            assert phase is Phase.IN_FLIGHT, (name, explanation)
        elif per_volume == Reason.ALREADY_DEFAULT or name in on_default:
            # (explain names a v2 volume's rule first, even when it is on the default image)
            assert phase is Phase.DONE, (name, explanation)
        elif explanation.reason in (Reason.AWAITING_DECISION, Reason.NODE_LIMIT_REACHED):
            assert phase is Phase.WAITING, (name, explanation)
        else:
            assert (phase, reason) == (Phase.BLOCKED, str(explanation.reason)), (name, explanation)


def test_an_unreadable_volume_is_blocked_as_unreadable() -> None:
    """The watcher's UNREADABLE marker (the volume's latest version does not decode)."""
    model, events = ProgressModel(), Events()
    cluster(model, events)
    put(model, events, *with_replicas(volume("a")), *with_replicas(volume("b")))
    events.rv += 1
    model.apply(
        ObjectEvent(
            type=EventType.UNREADABLE,
            kind="volume",
            namespace=NS,
            name="b",
            resource_version=str(events.rv),
            reason="Expected `object`, got `null`",
        )
    )
    assert figures(model.total()) == (0, 0, 1, {"unreadable": 1})
    put(model, events, volume("b"))
    assert figures(model.total()) == (0, 0, 2, {})


def test_beside_longhorn_the_figures_use_corrals_own_limit_not_the_zeroed_setting() -> None:
    """Mode act/auto: Longhorn's setting is 0 (its loop off) and the service upgrades with
    CORRAL_PER_NODE_LIMIT; `corral progress --limit` draws that, not a wave blocked as disabled."""
    as_longhorn, events = ProgressModel(), Events()
    cluster(as_longhorn, events, limit="0")
    put(as_longhorn, events, *with_replicas(volume("b")))
    assert figures(row(as_longhorn, "n1")) == (0, 0, 0, {"disabled": 1})

    beside, events = ProgressModel(limit_override=3), Events()
    cluster(beside, events, limit="0")
    put(beside, events, *with_replicas(volume("b")))
    assert figures(row(beside, "n1")) == (0, 0, 1, {})
    assert beside.limit == 3 and "limit 3 per owner node" in beside.heading()


def test_an_upgrade_past_its_bound_is_shown_stuck_with_the_slot_it_holds() -> None:
    now = [1000.0]
    model, events = ProgressModel(lambda: now[0], stuck=StuckBounds(live=60.0, offline=60.0)), Events()
    cluster(model, events)
    put(model, events, *with_replicas(volume("a", image=NEW, current=OLD)))
    put(model, events, *with_replicas(volume("b", owner="n2", image=NEW, current=OLD)))
    now[0] += 30
    put(model, events, upgraded(volume("b", owner="n2"), done=True))  # b finished in time
    now[0] += 30
    (line,) = model.details()
    assert line.startswith("stuck: longhorn-system/a holds a slot on n1: in flight 60s, past the 60s bound")
    # its way out (rollback.py): the old image is deployed, so Longhorn can roll it back
    assert "; awaiting rollback approval: Longhorn can roll it back to" in line
    assert "`corral engine-upgrade rollback a --namespace longhorn-system`" in line
    assert model.stuck_by_node() == {"n1": 1}
    assert figures(row(model, "n1"))[0] == 1  # still in flight: the slot stays counted
    put(model, events, upgraded(volume("a"), done=True))
    assert model.details() == [] and model.stuck_by_node() == {}
