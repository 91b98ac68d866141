"""Property tests of selection against brute force: after any sequence of events — including the
ones that re-judge everything lazily (a new default image, engine images changing readiness) —
`decide()` leaves no owner node with a free slot and an eligible volume, and it chooses each node's
eligible volumes in pick order: live (attached) before offline, then by name — also when volumes
attach or detach while they wait."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_engine_upgrade.core import EngineUpgradeDecider
from corral_engine_upgrade.eligibility import volume_reason
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING
from corral_model.envelopes import Command, Outcome
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NEWER,
    NODES,
    OLD,
    Clock,
    Feed,
    engine_image,
    longhorn_node,
    replica,
    result,
    setting,
    upgraded,
    volume,
)

IMAGES = [OLD, NEW, NEWER]


def eligible_by_owner(decider: EngineUpgradeDecider, now: float) -> dict[str, list[str]]:
    """Each owner node's eligible volumes in pick order, computed from scratch."""
    out: dict[str, list[tuple[bool, str]]] = defaultdict(list)
    for v in decider.view.volumes():
        if volume_reason(v, decider.view, now) is None:
            out[v.owner].append((v.state != "attached", v.name))
    return {node: [name for _, name in sorted(keys)] for node, keys in out.items()}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_decide_fills_every_free_slot_in_pick_order(data: st.DataObject) -> None:
    clock = Clock()
    decider = EngineUpgradeDecider(clock)
    feed = Feed(decider)
    feed.put(*(longhorn_node(n) for n in NODES))
    for image in IMAGES:
        feed.put(engine_image(image, api=data.draw(st.integers(4, 7))))
    feed.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, str(data.draw(st.integers(0, 3)))))
    count = data.draw(st.integers(1, 15))
    volumes = {}
    for i in range(count):
        name = f"v{i:02d}"
        vol = volume(
            name,
            owner=data.draw(st.sampled_from(NODES)),
            state=data.draw(st.sampled_from(["attached", "detached"])),
            robustness=data.draw(st.sampled_from(["healthy", "healthy", "degraded"])),
            image=data.draw(st.sampled_from(IMAGES)),
        )
        volumes[name] = vol
        feed.volume_with_replicas(vol, tuple(data.draw(st.lists(st.sampled_from(NODES), max_size=3))))
    feed.resync()
    issued: list[Command] = []
    for _ in range(data.draw(st.integers(1, 40))):
        action = data.draw(
            st.sampled_from(["decide", "default", "ei", "limit", "volume", "replica", "result", "done"])
        )
        if action == "default":
            feed.put(setting(DEFAULT_IMAGE_SETTING, data.draw(st.sampled_from(IMAGES))))
        elif action == "ei":
            nodes = {n: data.draw(st.booleans()) for n in NODES}
            feed.put(
                engine_image(
                    data.draw(st.sampled_from(IMAGES)), nodes=nodes, api=data.draw(st.integers(4, 7))
                )
            )
        elif action == "limit":
            feed.put(setting(LIMIT_SETTING, str(data.draw(st.integers(0, 3)))))
        elif action == "volume":
            name = data.draw(st.sampled_from(sorted(volumes)))
            vol = volume(
                name,
                owner=data.draw(st.sampled_from(NODES)),
                state=data.draw(st.sampled_from(["attached", "detached"])),
                robustness=data.draw(st.sampled_from(["healthy", "degraded"])),
                image=volumes[name].spec.image,
            )
            volumes[name] = vol
            feed.put(vol)
        elif action == "replica":
            feed.put(
                replica(
                    data.draw(st.sampled_from(sorted(volumes))),
                    data.draw(st.integers(0, 3)),
                    data.draw(st.sampled_from(NODES)),
                )
            )
        elif action == "result" and issued:
            command = issued.pop(data.draw(st.integers(0, len(issued) - 1)))
            decider.record_result(result(command, data.draw(st.sampled_from(list(Outcome)))))
        elif action == "done" and issued:
            command = issued.pop(0)
            vol = upgraded(
                volumes[command.target.name], command.changes[0].value, done=data.draw(st.booleans())
            )
            volumes[vol.metadata.name] = vol
            feed.put(vol)
        elif action == "decide":
            before = eligible_by_owner(decider, clock.now)
            commands = decider.decide()
            issued.extend(commands)
            chosen: dict[str, list[str]] = defaultdict(list)
            for command in commands:
                record = decider.view.volume(command.target.namespace, command.target.name)
                assert record is not None
                chosen[record.owner].append(record.name)
            limit = decider.view.limit
            for node, names in chosen.items():
                # the first eligible volumes of that node: live ones first, then by name
                assert names == before[node][: len(names)], (node, names, before[node])
            after = eligible_by_owner(decider, clock.now)
            in_flight = decider.in_flight_by_node()
            for node, names in after.items():
                assert not names or limit <= 0 or in_flight.get(node, 0) >= limit, (
                    f"{node}: free slot ({in_flight.get(node, 0)}/{limit}) but eligible {names} left waiting"
                )
