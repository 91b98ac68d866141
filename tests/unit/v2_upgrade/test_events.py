"""Events on the two upgrade CRs (announce.py): one per transition however many decision passes go
by, Warning for a failure, a block, an abort or a retry, about corral's own CRs only, never repeated
by a restarted decider, and each one let through by the actuator's policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from corral_actuator.policy import Policy
from corral_decision.events import OCCURRENCE_PATH
from corral_model.envelopes import Command
from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE
from tests.unit.v2_upgrade.world import NEW, OLD, World, cluster, kube_node, manager, replica, setting

POLICY = Policy.load(Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml")
EVENTS = DeciderConfig(node_timeout=0, events=True)
NEWER = "longhornio/longhorn-instance-manager:v1.10.1"


def said(world: World) -> list[tuple[str, str, str, str]]:
    """(involved kind, type, reason, message) of every Event recorded so far."""
    out = []
    for command in world.events:
        body: dict[str, Any] = command.body or {}
        out.append((body["involvedObject"]["kind"], body["type"], body["reason"], body["message"]))
    return out


def about_node(world: World, node: str) -> list[tuple[str, str]]:
    name = world.node_upgrades(node)[0].metadata.name
    return [
        (b["reason"], b["message"])
        for b in (c.body or {} for c in world.events)
        if b["involvedObject"]["name"] == name
    ]


def test_a_whole_upgrade_tells_each_transition_once() -> None:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"}, config=EVENTS)
    world.put(manager())
    world.start()
    assert world.run() == "completed"
    for _ in range(5):  # more passes after the end: nothing new to say
        world.step(tick=1.0)
    manager_events = [(t, r, m) for k, t, r, m in said(world) if k == "DataEngineUpgradeManager"]
    assert manager_events[:3] == [
        ("Normal", "StateChanged", "state undefined -> initializing"),
        ("Normal", "StateChanged", "state initializing -> upgrading"),
        ("Normal", "NodeUpgradeStarted", f"node node-1: upgrade to {NEW} started (attempt 1)"),
    ]
    assert manager_events[-1] == ("Normal", "UpgradeCompleted", "3 of 3 nodes upgraded")
    started = [m for _, r, m in manager_events if r == "NodeUpgradeStarted"]
    completed = [m for _, r, m in manager_events if r == "NodeUpgradeCompleted"]
    assert started == [f"node node-{i}: upgrade to {NEW} started (attempt 1)" for i in (1, 2, 3)]
    assert completed == [f"node node-{i}: upgraded" for i in (1, 2, 3)]
    steps = [m for r, m in about_node(world, "node-1") if r == "StateChanged"]
    assert steps == [
        "state undefined -> initializing",
        "state initializing -> failing-replicas",
        "state failing-replicas -> switching-over",
        "state switching-over -> upgrading-instance-manager",
        "state upgrading-instance-manager -> switching-back",
        "state switching-back -> rebuilding-replica",
        "state rebuilding-replica -> finalizing",
    ]
    assert about_node(world, "node-1")[-1] == (
        "NodeUpgradeCompleted",
        f"node node-1: instance manager upgraded to {NEW}; volumes 1/1",
    )
    assert all(t == "Normal" for _, t, _, _ in said(world))
    # One command per transition, each its own Event (a name per report), about the CR.
    assert len({c.target.name for c in world.events}) == len(world.events)
    for command in world.events:
        body = command.body or {}
        involved = body["involvedObject"]
        assert involved["apiVersion"] == f"{CORRAL_GROUP}/{CORRAL_VERSION}"
        if involved["kind"] == "DataEngineUpgradeManager":
            assert involved["uid"] == "uid-upgrade"
        assert body["source"] == {"component": "corral-v2-upgrade"}
        assert [p.path for p in command.preconditions] == [OCCURRENCE_PATH]
        verdict = POLICY.check(command)
        assert verdict.allowed, verdict.reason


def test_a_blocking_volume_is_a_warning_once_naming_it() -> None:
    world = cluster(volumes={"vol-a": "node-1", "pvc-x": "node-2"}, config=EVENTS)
    vol = world.get("volume", "pvc-x")
    world.put(msgspec.structs.replace(vol, spec=msgspec.structs.replace(vol.spec, number_of_replicas=1)))
    world.delete("replica", replica("pvc-x", "node-1").metadata.name)
    world.delete("replica", replica("pvc-x", "node-3").metadata.name)
    world.put(manager())
    world.start()
    for _ in range(60):  # node-1 goes through; node-2 is held by pvc-x for many passes
        world.step(tick=1.0)
    blocked = [(t, m) for _, t, r, m in said(world) if r == "VolumeBlocked"]
    assert blocked == [
        ("Warning", "volume pvc-x has only 1 replica, which is not supported for live upgrade")
    ]
    assert about_node(world, "node-2")[-1][0] == "VolumeBlocked"


def test_a_failing_node_is_aborted_retried_then_failed_each_a_warning() -> None:
    config = DeciderConfig(node_timeout=20, max_retries=2, events=True)
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"}, config=config)
    world.stalled.add("vol-a")  # node-1's switch-over never finishes: every attempt times out
    world.put(manager())
    world.start()
    assert world.run(limit=400) == "completed"
    world.step(tick=1.0)  # the pass after the end hands out what it saw
    events = said(world)
    warnings = [(k, r) for k, t, r, _ in events if t == "Warning"]
    assert warnings == [
        ("NodeDataEngineUpgrade", "Aborted"),
        ("NodeDataEngineUpgrade", "NodeUpgradeFailed"),
        ("DataEngineUpgradeManager", "NodeUpgradeRetried"),
        ("NodeDataEngineUpgrade", "Aborted"),
        ("NodeDataEngineUpgrade", "NodeUpgradeFailed"),
        ("DataEngineUpgradeManager", "NodeUpgradeFailed"),
        ("DataEngineUpgradeManager", "UpgradeCompleted"),  # with a failed node: a warning
    ]
    aborted = next(m for _, _, r, m in events if r == "Aborted")
    assert aborted == (
        "node node-1: aborted (timeout) in switching-over: volume vol-a is not switched over to node-2;"
        " switching-back to restore"
    )
    retried = next(m for _, _, r, m in events if r == "NodeUpgradeRetried")
    assert retried.startswith("node node-1: attempt failed, will retry: aborted (timeout)")
    assert retried.endswith("(failed attempts: 1)")
    summary = events[-1][3]
    assert summary.startswith("2 of 3 nodes upgraded; failed: node-1 (failed 2 times")


def test_a_restarted_decider_does_not_repeat_what_was_told() -> None:
    world = cluster(volumes={"vol-a": "node-1"}, config=EVENTS)
    world.put(manager())
    world.start()
    for _ in range(8):
        world.step(tick=1.0)
    told = len(world.events)
    assert told > 0
    world.restart()
    assert [c for c in world.decider.decide() if c.target.kind == "Event"] == []
    world.run()
    reports = [(c.body or {})["involvedObject"]["name"] + (c.body or {})["message"] for c in world.events]
    assert len(reports) == len(set(reports))  # every transition told at most once


def test_events_are_off_unless_asked_for_and_not_expectations() -> None:
    quiet = cluster(volumes={"vol-a": "node-1"})
    quiet.put(manager())
    quiet.start()
    quiet.run()
    assert quiet.events == []
    world = cluster(volumes={"vol-a": "node-1"}, config=EVENTS)
    world.put(manager())
    world.start()
    for _ in range(3):
        commands: list[Command] = world.step(tick=1.0)
        events = {c.target.name for c in commands if c.target.kind == "Event"}
        assert not events & {p.target.name for p in world.decider.expectations()}
    assert world.events


def test_a_new_target_image_is_told_with_the_abort_and_the_requeue() -> None:
    world = cluster(volumes={"vol-a": "node-1"}, config=EVENTS)
    for name in ("node-1", "node-2", "node-3"):
        world.put(kube_node(name, images=(OLD, NEW, NEWER)))
    world.put(manager())
    world.start()
    for _ in range(40):
        world.step(tick=1.0)
        upgrades = world.node_upgrades("node-1")
        if upgrades and upgrades[0].status.state == "switching-over":
            break
    world.put(setting(DEFAULT_IM_IMAGE, NEWER))
    assert world.run(limit=400) == "completed"
    world.step(tick=1.0)
    told = [(r, m) for _, _, r, m in said(world)]
    changed = ("TargetImageChanged", f"target image changed from {NEW} to {NEWER}")
    abort = "aborted (target-image-changed) in switching-over"
    aborted = ("Aborted", f"node node-1: {abort}; switching-back to restore")
    requeued = [m for r, m in told if r == "NodeUpgradeRequeued"]
    assert told.index(changed) < told.index(aborted)
    assert requeued == [f"node node-1: restarting with the new image: {abort}; restored"]
    assert [r for r, _ in told].count("NodeUpgradeRetried") == 0  # no retry used
    assert told[-1] == ("UpgradeCompleted", "3 of 3 nodes upgraded")
