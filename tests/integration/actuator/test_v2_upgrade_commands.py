"""v2-upgrade's commands as the actuator applies them to the sandbox's API emulator, under the real
policy: a decider built afresh from the emulator's objects before every pass (a restart each time)
takes a new manager (no status at all) through initializing, starts node-1 (a NodeDataEngineUpgrade
created), snapshots its volume, stops and deletes its v2 replica and leaves the v1 one alone, up to
switching-over. Every command is applied; none repeats an earlier one."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from corral_model.envelopes import Command, EventType, ObjectEvent, Outcome, Verb
from corral_model.kinds import KINDS
from corral_sandbox.emulator import Emulator
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.core import READS, V2UpgradeDecider
from tests.integration.actuator.conftest import NS, MakeActuator

pytestmark = pytest.mark.integration

OLD = "longhornio/longhorn-instance-manager:v1.9.0"
NEW = "longhornio/longhorn-instance-manager:v1.10.0"
LH = "longhorn.io/v1beta2"


def _seed(emulator: Emulator) -> None:
    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": NS, "uid": f"uid-{name}"}

    emulator.load(
        "longhorn.io",
        "settings",
        [
            {
                "apiVersion": LH,
                "kind": "Setting",
                "metadata": meta("default-instance-manager-image"),
                "value": NEW,
            }
        ],
    )
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    emulator.load(
        "longhorn.io",
        "nodes",
        [
            {"apiVersion": LH, "kind": "Node", "metadata": meta(n), "status": ready}
            for n in ("node-1", "node-2")
        ],
    )
    images = {"images": [{"names": [OLD]}, {"names": [NEW]}]}
    emulator.load(
        "",
        "nodes",
        [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}, "status": images}
            for n in ("node-1", "node-2")
        ],
    )
    emulator.load(
        "longhorn.io",
        "instancemanagers",
        [
            {
                "apiVersion": LH,
                "kind": "InstanceManager",
                "metadata": meta(f"im-v2-{n}"),
                "spec": {"nodeID": n, "dataEngine": "v2", "type": "aio", "image": OLD},
                "status": {"currentState": "running"},
            }
            for n in ("node-1", "node-2")
        ],
    )
    emulator.load(
        "longhorn.io",
        "volumes",
        [
            {
                "apiVersion": LH,
                "kind": "Volume",
                "metadata": meta("vol-a"),
                "spec": {"dataEngine": "v2", "numberOfReplicas": 2, "nodeID": "node-1", "image": OLD},
                "status": {
                    "state": "attached",
                    "robustness": "healthy",
                    "ownerID": "node-1",
                    "currentNodeID": "node-1",
                },
            }
        ],
    )
    emulator.load(
        "longhorn.io",
        "engines",
        [
            {
                "apiVersion": LH,
                "kind": "Engine",
                "metadata": meta("vol-a-e-0"),
                "spec": {"volumeName": "vol-a", "nodeID": "node-1", "dataEngine": "v2"},
                "status": {"currentState": "running"},
            }
        ],
    )

    def replica(name: str, volume: str, node: str, engine: str) -> dict[str, Any]:
        return {
            "apiVersion": LH,
            "kind": "Replica",
            "metadata": meta(name),
            "spec": {"volumeName": volume, "nodeID": node, "dataEngine": engine, "desireState": "running"},
            "status": {"currentState": "running"},
        }

    emulator.load(
        "longhorn.io",
        "replicas",
        [
            replica("vol-a-r-1", "vol-a", "node-1", "v2"),
            replica("vol-a-r-2", "vol-a", "node-2", "v2"),
            replica("vol-v1-r-1", "vol-v1", "node-1", "v1"),
        ],
    )
    emulator.load(
        "corral.longhorn.io",
        "dataengineupgrademanagers",
        [
            {
                "apiVersion": "corral.longhorn.io/v1alpha1",
                "kind": "DataEngineUpgradeManager",
                "metadata": meta("upgrade"),
                "spec": {"dataEngine": "v2"},
            }
        ],
    )
    emulator.write_log.clear()


def _fresh_decider(emulator: Emulator, now: float) -> V2UpgradeDecider:
    decider = V2UpgradeDecider(lambda: now, DeciderConfig(snapshot_before_upgrade=True))
    for token in sorted(READS):
        info = KINDS[token]
        for raw in emulator.list(info.group, info.plural, NS if info.namespaced else None):
            obj = msgspec.convert(raw, info.struct)
            decider.apply(
                ObjectEvent(
                    type=EventType.ADDED,
                    kind=token,
                    namespace=obj.metadata.namespace,
                    name=obj.metadata.name,
                    uid=obj.metadata.uid,
                    resource_version=obj.metadata.resource_version,
                    object=obj,
                )
            )
        decider.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=NS, name=""))
    return decider


def _play_data_plane(emulator: Emulator) -> None:
    """Longhorn's part, as seeding: a stopped replica stops; a snapshot becomes ready."""
    for raw in emulator.list("longhorn.io", "replicas", NS):
        if (
            raw["spec"].get("desireState") == "stopped"
            and raw.get("status", {}).get("currentState") != "stopped"
        ):
            raw["status"] = {"currentState": "stopped"}
            emulator.load("longhorn.io", "replicas", [raw])
    for raw in emulator.list("longhorn.io", "snapshots", NS):
        if not raw.get("status", {}).get("readyToUse"):
            raw["status"] = {"readyToUse": True}
            emulator.load("longhorn.io", "snapshots", [raw])


def _node_state(emulator: Emulator) -> str:
    found = emulator.list("corral.longhorn.io", "nodedataengineupgrades", NS)
    return str(found[0].get("status", {}).get("state", "")) if found else ""


async def test_a_fresh_decider_each_pass_drives_node_1_to_switching_over(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    _seed(emulator)
    actuator = make_actuator()
    sent: list[Command] = []
    for _ in range(30):
        commands = _fresh_decider(emulator, time.time()).decide()
        for command in commands:
            result = await actuator.execute(command)
            assert result.outcome is Outcome.APPLIED, (command.reason, result.detail)
        sent.extend(commands)
        _play_data_plane(emulator)
        if _node_state(emulator) == "switching-over":
            break
    assert _node_state(emulator) == "switching-over"
    manager = emulator.get("corral.longhorn.io", "dataengineupgrademanagers", NS, "upgrade")
    assert manager is not None
    assert (manager["status"]["state"], manager["status"]["upgradingNode"]) == ("upgrading", "node-1")
    assert manager["status"]["instanceManagerImage"] == NEW
    [node_upgrade] = emulator.list("corral.longhorn.io", "nodedataengineupgrades", NS)
    assert node_upgrade["spec"]["nodeID"] == "node-1" and node_upgrade["spec"]["instanceManagerImage"] == NEW
    [snapshot] = emulator.list("longhorn.io", "snapshots", NS)
    assert node_upgrade["status"]["volumes"]["vol-a"]["snapshot"] == snapshot["metadata"]["name"]
    assert emulator.get("longhorn.io", "replicas", NS, "vol-a-r-1") is None
    assert emulator.get("longhorn.io", "replicas", NS, "vol-a-r-2") is not None
    v1 = emulator.get("longhorn.io", "replicas", NS, "vol-v1-r-1")
    assert v1 is not None and v1["spec"]["desireState"] == "running"
    creates = [c.target.name for c in sent if c.verb is Verb.CREATE]
    assert len(creates) == len(set(creates)) == 2
    assert not [c for c in sent if c.target.name.startswith("vol-v1")]
