"""v2-upgrade as the kit and the actuator see it: found through its entry point, subscribed to
every kind it reads, and every command a whole upgrade sends let through by the actuator's policy
(with each rule's required preconditions), while the same writes without them are refused."""

from __future__ import annotations

from pathlib import Path

import msgspec

from corral_actuator.policy import Policy
from corral_decision import Timing, decision_service
from corral_model.envelopes import Verb
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.service import DEFINITION, V2UpgradeConfig, gauges
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE
from tests.unit.v2_upgrade.world import NEW, cluster, manager, volume

POLICY = Policy.load(Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml")


def test_the_kit_finds_v2_upgrade_through_its_entry_point() -> None:
    assert decision_service("v2-upgrade") is DEFINITION
    assert DEFINITION.command_token("NodeDataEngineUpgrade") == "nodedataengineupgrade"
    assert DEFINITION.command_token("Snapshot") == "snapshot"
    assert "lh.obj.kubenode._.>" in DEFINITION.object_filters("longhorn-system")
    assert "lh.obj.snapshot.longhorn-system.>" in DEFINITION.object_filters("longhorn-system")


def test_config_reaches_the_decider() -> None:
    config = V2UpgradeConfig(
        service="v2-upgrade", node_timeout_s=60, max_node_retries=2, snapshot_before_upgrade=True
    )
    assert config.decider_config() == DeciderConfig(
        timing=Timing(
            command_ttl=config.command_ttl_s,
            applied_ttl=config.applied_ttl_s,
            retry_backoff=config.retry_backoff_s,
        ),
        node_timeout=60,
        max_retries=2,
        snapshot_before_upgrade=True,
        events=True,
    )


def test_every_command_of_a_whole_upgrade_passes_the_policy() -> None:
    world = cluster(
        volumes={"vol-a": "node-1", "vol-b": "node-2"},
        config=DeciderConfig(node_timeout=0, snapshot_before_upgrade=True),
    )
    world.put(*volume("vol-off", "node-1", attached=False), manager())
    world.start()
    for _ in range(200):
        for snap in world.all("snapshot"):
            if not snap.status.ready_to_use:
                world.put(
                    msgspec.structs.replace(
                        snap, status=msgspec.structs.replace(snap.status, ready_to_use=True)
                    )
                )
        world.step(tick=1.0)
        if world.get("dataengineupgrademanager", "upgrade").status.state == "completed":
            break
    commands = world.applied
    assert {(c.verb, c.target.kind) for c in commands} == {
        (Verb.PATCH_STATUS, "DataEngineUpgradeManager"),
        (Verb.CREATE, "NodeDataEngineUpgrade"),
        (Verb.PATCH_STATUS, "NodeDataEngineUpgrade"),
        (Verb.CREATE, "Snapshot"),
        (Verb.PATCH, "Replica"),
        (Verb.DELETE, "Replica"),
        (Verb.PATCH, "Volume"),
        (Verb.DELETE, "InstanceManager"),
    }
    settings = {DEFAULT_IM_IMAGE: NEW}  # what the actuator reads live for an IM delete
    for command in commands:
        verdict = POLICY.check(command, settings)
        assert verdict.allowed, (command.reason, verdict.reason)
        if command.verb is not Verb.CREATE:
            stripped = msgspec.structs.replace(command, preconditions=())
            assert not POLICY.check(stripped, settings).allowed, command.reason
    families = {f.name: f for f in gauges(world.decider)}
    assert [s.value for s in families["corral_v2_upgrade_nodes_in_flight"].samples] == [0]
