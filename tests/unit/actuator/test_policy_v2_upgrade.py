"""The actuator's policy for v2-upgrade, on the commands its own code builds
(corral_v2_upgrade.commands, announce.py): each write of the two state machines is let through,
with the guards that keep it on a v2 object, and each near miss is refused: a v1 replica, an
instance manager already on the image being installed, a volume that is not v2, a field or a kind
outside the table, an Event about anything but the two CRs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from corral_actuator.policy import Policy
from corral_decision.events import EventType, event_command
from corral_kube.patching import first_not_holding
from corral_model import longhorn as lh
from corral_model.envelopes import Command, FieldValue, Target, Verb
from corral_v2_upgrade import commands as cmd
from corral_v2_upgrade.announce import Announcer
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE
from tests.unit.v2_upgrade.world import NEW, NS, OLD, instance_manager, manager, replica, volume

POLICY = Policy.load(Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml")
SETTINGS: dict[str, str | None] = {DEFAULT_IM_IMAGE: NEW}
NOW = 1_800_000_000.0
V2_GUARD = FieldValue(path="/spec/dataEngine", value="v2")


Obj = TypeVar(
    "Obj", lh.Volume, lh.Replica, lh.InstanceManager, lh.DataEngineUpgradeManager, lh.NodeDataEngineUpgrade
)


def stamped(obj: Obj, rv: str = "7") -> Obj:
    return msgspec.structs.replace(obj, metadata=msgspec.structs.replace(obj.metadata, resource_version=rv))


def check(command: Command, settings: dict[str, str | None] | None = None) -> tuple[bool, str]:
    needed = POLICY.settings_needed(command)
    given = SETTINGS if settings is None else settings
    verdict = POLICY.check(command, {name: given.get(name) for name in needed})
    return verdict.allowed, verdict.reason


def the_manager() -> lh.DataEngineUpgradeManager:
    m = stamped(manager())
    return msgspec.structs.replace(
        m, status=msgspec.structs.replace(m.status, state="upgrading", instance_manager_image=NEW)
    )


def a_node_upgrade() -> lh.NodeDataEngineUpgrade:
    return stamped(
        lh.NodeDataEngineUpgrade(
            metadata=lh.ObjectMeta(name="upgrade-node-1-abc", namespace=NS, uid="uid-nu"),
            spec=lh.NodeDataEngineUpgradeSpec(
                node_id="node-1", instance_manager_image=NEW, data_engine_upgrade_manager="upgrade"
            ),
            status=lh.NodeDataEngineUpgradeStatus(state="switching-over"),
        )
    )


def v2_volume(engine: str = "v2") -> lh.Volume:
    vol: lh.Volume = volume("vol-a", "node-1", engine=engine)[0]
    return stamped(vol)


def its_commands() -> list[Command]:
    """One of each write the state machines make (the README's table)."""
    upgrade = a_node_upgrade()
    return [
        cmd.patch_status(cmd.MANAGER_KIND, the_manager(), {"upgradingNode": "node-1"}, NOW),
        cmd.create_node_upgrade(the_manager(), "node-1", 0, False, NOW),
        cmd.patch_status(cmd.NODE_UPGRADE_KIND, upgrade, {"state": "upgrading-instance-manager"}, NOW),
        cmd.create_snapshot(upgrade, "vol-a", NOW),
        cmd.fail_replica(stamped(replica("vol-a", "node-1")), NOW),
        cmd.delete_replica(stamped(replica("vol-a", "node-1")), NOW),
        cmd.patch_volume(v2_volume(), NEW, "node-2", "switching-over", NOW),
        cmd.patch_volume(v2_volume(), None, "", "switching-back", NOW),
        cmd.delete_instance_manager(stamped(instance_manager("node-1", OLD)), NEW, NOW),
    ]


def its_events() -> list[Command]:
    """The Events announce.py makes on both CRs (a step of each, and a failure)."""
    announcer = Announcer()
    m = the_manager()
    done = msgspec.structs.replace(m, status=msgspec.structs.replace(m.status, state="completed"))
    announcer.manager_moved(m, done, NOW)
    upgrade = a_node_upgrade()
    failed = msgspec.structs.replace(
        upgrade, status=msgspec.structs.replace(upgrade.status, state="error", message="boom")
    )
    announcer.node_upgrade_moved(upgrade, failed, NOW)
    return announcer.take()


@pytest.mark.parametrize("command", its_commands(), ids=lambda c: f"{c.verb}-{c.target.kind}")
def test_each_write_of_the_state_machines_is_allowed(command: Command) -> None:
    allowed, reason = check(command)
    assert allowed, reason
    verdict = POLICY.check(command, SETTINGS)
    if command.target.kind in ("Volume", "Replica", "InstanceManager"):
        assert V2_GUARD in verdict.guards  # enforced on the object, whatever the command says


def test_its_events_about_both_crs_are_allowed() -> None:
    events = its_events()
    assert {(c.body or {})["involvedObject"]["kind"] for c in events} == {
        "DataEngineUpgradeManager",
        "NodeDataEngineUpgrade",
    }
    for command in events:
        allowed, reason = check(command)
        assert allowed, reason


def _event_about(kind: str, api_version: str = "") -> Command:
    command = event_command(
        service="v2-upgrade",
        about=Target(kind=kind, namespace=NS, name="x"),
        type_=EventType.WARNING,
        reason="VolumeBlocked",
        message="m",
        now=NOW,
    )
    body = dict(command.body or {})
    if api_version:
        body["involvedObject"] = {**body["involvedObject"], "apiVersion": api_version}
    return msgspec.structs.replace(command, body=body)


def _no_involved_object() -> Command:
    command = _event_about("NodeDataEngineUpgrade")
    body = {k: v for k, v in (command.body or {}).items() if k != "involvedObject"}
    return msgspec.structs.replace(command, body=body)


def _without(command: Command, path: str) -> Command:
    return msgspec.structs.replace(
        command, preconditions=tuple(p for p in command.preconditions if p.path != path)
    )


def _retargeted(command: Command, kind: str) -> Command:
    return msgspec.structs.replace(command, target=msgspec.structs.replace(command.target, kind=kind))


def near_misses() -> list[tuple[str, Command, dict[str, str | None] | None]]:
    v1_replica = stamped(replica("vol-v1", "node-1", engine="v1"))
    status_patch = cmd.patch_status(cmd.MANAGER_KIND, the_manager(), {"state": "completed"}, NOW)
    volume_patch = cmd.patch_volume(v2_volume(), NEW, "node-2", "switching-over", NOW)
    return [
        ("a replica delete that says v1", _saying_v1(cmd.delete_replica(v1_replica, NOW)), None),
        ("a replica stop that says v1", _saying_v1(cmd.fail_replica(v1_replica, NOW)), None),
        (
            "a replica delete without v2",
            _without(cmd.delete_replica(v1_replica, NOW), "/spec/dataEngine"),
            None,
        ),
        (
            "a replica delete off the node",
            _without(cmd.delete_replica(v1_replica, NOW), "/spec/nodeID"),
            None,
        ),
        (
            "an IM delete on the new image",
            cmd.delete_instance_manager(stamped(instance_manager("node-1", NEW)), NEW, NOW),
            None,
        ),
        (
            "an IM delete while the target image is unknown",
            cmd.delete_instance_manager(stamped(instance_manager("node-1", OLD)), NEW, NOW),
            {},
        ),
        (
            "an IM delete that does not name the image",
            _without(
                cmd.delete_instance_manager(stamped(instance_manager("node-1", OLD)), NEW, NOW), "/spec/image"
            ),
            None,
        ),
        ("a volume patch that says v1", _saying_v1(volume_patch), None),
        ("a volume patch without dataEngine v2", _without(volume_patch, "/spec/dataEngine"), None),
        ("a volume patch of another field", _changed(volume_patch, "/spec/numberOfReplicas", 1), None),
        ("an engine patch", _retargeted(volume_patch, "Engine"), None),
        ("a Longhorn node patch", _retargeted(volume_patch, "Node"), None),
        ("a setting patch", _retargeted(volume_patch, "Setting"), None),
        ("a manager status field it never writes", _changed(status_patch, "/status/ownerID", "me"), None),
        ("the manager's spec", _retargeted_verb(_changed(status_patch, "/spec/nodes", []), Verb.PATCH), None),
        ("an Event about a volume", _event_about("Volume"), None),
        ("an Event about an instance manager", _event_about("InstanceManager"), None),
        (
            "an Event about a look-alike kind",
            _event_about("NodeDataEngineUpgrade", "longhorn.io/v1beta2"),
            None,
        ),
        ("an Event about nothing", _no_involved_object(), None),
    ]


def _saying_v1(command: Command) -> Command:
    return msgspec.structs.replace(
        command,
        preconditions=tuple(
            FieldValue(path=p.path, value="v1") if p.path == "/spec/dataEngine" else p
            for p in command.preconditions
        ),
    )


def _changed(command: Command, path: str, value: Any) -> Command:
    return msgspec.structs.replace(command, changes=(FieldValue(path=path, value=value),))


def _retargeted_verb(command: Command, verb: Verb) -> Command:
    return msgspec.structs.replace(command, verb=verb)


@pytest.mark.parametrize(
    ("why", "command", "settings"), near_misses(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_near_misses_are_refused(why: str, command: Command, settings: dict[str, str | None] | None) -> None:
    allowed, reason = check(command, settings)
    assert not allowed, why
    assert reason


def test_the_refusals_say_why() -> None:
    new_im = cmd.delete_instance_manager(stamped(instance_manager("node-1", NEW)), NEW, NOW)
    assert check(new_im)[1] == (
        f"a InstanceManager delete by v2-upgrade may not be on /spec/image == {NEW!r},"
        f" the {DEFAULT_IM_IMAGE} setting's value"
    )
    assert POLICY.settings_needed(new_im) == {DEFAULT_IM_IMAGE}
    assert check(_event_about("Volume"))[1] == (
        "the Event to create is outside the policy: /involvedObject/apiVersion: another value;"
        " the policy requires 'corral.longhorn.io/v1alpha1'"
    )


def test_a_v1_object_is_outside_the_policy_whatever_the_command_says() -> None:
    """The commands always say v2; on a v1 replica or volume the rule's required fields do not hold,
    so the actuator refuses the write on the object it reads (rejected by policy), never applies it."""
    v1_replica = stamped(replica("vol-v1", "node-1", engine="v1"))
    v1_im = stamped(instance_manager("node-1", OLD, engine="v1"))
    for obj, command in (
        (v1_replica, cmd.delete_replica(v1_replica, NOW)),
        (v1_replica, cmd.fail_replica(v1_replica, NOW)),
        (v2_volume("v1"), cmd.patch_volume(v2_volume("v1"), NEW, "node-2", "x", NOW)),
        (v1_im, cmd.delete_instance_manager(v1_im, NEW, NOW)),
    ):
        verdict = POLICY.check(command, SETTINGS)
        assert verdict.allowed, verdict.reason
        assert first_not_holding(msgspec.to_builtins(obj), verdict.guards) == V2_GUARD


def test_a_service_may_opt_out_of_the_common_rules() -> None:
    text = """
schema: corral.actuator-policy/v2
namespaces: [longhorn-system]
common:
  - kind: event
    verbs: [create]
services:
  plain: {}
  narrow: {common: false}
"""
    policy = Policy.from_yaml(text)
    for service, allowed in (("plain", True), ("narrow", False)):
        # An Event in the service's own name about the Setting it reports its stance on.
        event = event_command(
            service=service,
            about=Target(kind="Setting", namespace=NS, name="x"),
            type_=EventType.NORMAL,
            reason="Stance",
            message="m",
            now=NOW,
        )
        assert policy.check(event).allowed is allowed


def test_the_actuator_reads_the_image_an_instance_manager_delete_is_checked_against() -> None:
    assert DEFAULT_IM_IMAGE in POLICY.setting_reads()
