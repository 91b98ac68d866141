"""v2-upgrade's Events as the actuator records them in the sandbox's API emulator, under the real
policy: one about a NodeDataEngineUpgrade is created once and counted on every later occurrence,
as Kubernetes' event recorder does; one about any other object is refused as a security event and
never written; and an instance-manager delete on the image the live setting installs is refused
before anything is sent."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_model import longhorn as lh
from corral_model.envelopes import Outcome
from corral_sandbox.emulator import Emulator
from corral_v2_upgrade import commands as cmd
from corral_v2_upgrade.announce import Announcer
from tests.integration.actuator.conftest import NS, MakeActuator, SecurityEvents

pytestmark = pytest.mark.integration

NEW = "longhornio/longhorn-instance-manager:v1.10.0"
STALLED = "volume pvc-x has only 1 replica, which is not supported for live upgrade"


def node_upgrade(message: str = "") -> lh.NodeDataEngineUpgrade:
    return lh.NodeDataEngineUpgrade(
        metadata=lh.ObjectMeta(name="upgrade-node-2-abcd1234", namespace=NS, uid="uid-nu"),
        spec=lh.NodeDataEngineUpgradeSpec(node_id="node-2", instance_manager_image=NEW),
        status=lh.NodeDataEngineUpgradeStatus(state="initializing", message=message),
    )


def blocked_at(now: float) -> Any:
    announcer = Announcer()
    announcer.node_upgrade_moved(node_upgrade(), node_upgrade(STALLED), now)
    [event] = announcer.take()
    return event


async def test_an_event_on_a_node_upgrade_is_one_event_counted(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    first, again = blocked_at(1_800_000_000), blocked_at(1_800_000_120)
    assert first.target == again.target and first.id != again.id
    actuator = make_actuator()
    for command in (first, again):
        result = await actuator.execute(command)
        assert result.outcome is Outcome.APPLIED, result.detail
    stored = emulator.get("", "events", NS, first.target.name)
    assert stored is not None
    assert (stored["type"], stored["reason"], stored["message"], stored["count"]) == (
        "Warning",
        "VolumeBlocked",
        STALLED,
        2,
    )
    assert stored["involvedObject"] == {
        "apiVersion": "corral.longhorn.io/v1alpha1",
        "kind": "NodeDataEngineUpgrade",
        "namespace": NS,
        "name": "upgrade-node-2-abcd1234",
        "uid": "uid-nu",
    }
    assert emulator.write_log.count(verb="create", plural="events") == 1


async def test_an_event_about_anything_else_is_refused(
    emulator: Emulator, make_actuator: MakeActuator, security_events: SecurityEvents
) -> None:
    command = blocked_at(1_800_000_000)
    body = dict(command.body or {})
    body["involvedObject"] = {"apiVersion": "longhorn.io/v1beta2", "kind": "Volume", "name": "pvc-x"}
    forged = msgspec.structs.replace(command, body=body)
    result = await make_actuator().execute(forged)
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert "involvedObject" in result.detail
    assert len(security_events.events) == 1
    assert emulator.write_log.count(verb="create", plural="events") == 0


async def test_an_instance_manager_on_the_image_being_installed_is_never_deleted(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    emulator.load(
        "longhorn.io",
        "settings",
        [
            {
                "apiVersion": "longhorn.io/v1beta2",
                "kind": "Setting",
                "metadata": {"name": "default-instance-manager-image", "namespace": NS},
                "value": NEW,
            }
        ],
    )
    im = lh.InstanceManager(
        metadata=lh.ObjectMeta(name="im-v2-node-1-new", namespace=NS, uid="uid-im"),
        spec=lh.InstanceManagerSpec(node_id="node-1", image=NEW, data_engine="v2"),
    )
    emulator.load(
        "longhorn.io",
        "instancemanagers",
        [{"apiVersion": "longhorn.io/v1beta2", "kind": "InstanceManager", **msgspec.to_builtins(im)}],
    )
    result = await make_actuator().execute(cmd.delete_instance_manager(im, NEW, 1_800_000_000))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert "default-instance-manager-image" in result.detail
    assert emulator.get("longhorn.io", "instancemanagers", NS, "im-v2-node-1-new") is not None
