"""An instance manager that starts an instance between im-restart's decision and the actuator's
delete keeps its pod: the delete carries preconditions on the instance manager the decision read
(nothing running or starting in its instance maps), and the actuator checks them just before it
deletes, naming the instance that broke them (issue 24, behaviour 1)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.core import READS, ImRestartDecider
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent, Outcome, Verb, new_command
from corral_sandbox.emulator import Emulator
from tests.integration.actuator.conftest import NS, MakeActuator
from tests.unit.im_restart.cluster import Clock, im_pod, instance_manager, kube_node, ready_node, setting

pytestmark = pytest.mark.integration

_PLACES = {
    "node": ("longhorn.io", "nodes", lh.Node),
    "kubenode": ("", "nodes", lh.KubeNode),
    "instancemanager": ("longhorn.io", "instancemanagers", lh.InstanceManager),
    "pod": ("", "pods", lh.Pod),
    "setting": ("longhorn.io", "settings", lh.Setting),
}


def _seed(emulator: Emulator) -> None:
    """node-1 with an idle running IM whose pod was built before `priority-class` changed."""
    node, kube = ready_node("node-1"), kube_node("node-1")
    im = instance_manager("im-1", "node-1")
    pod = im_pod(im, DangerZoneSettings.defaults(), node, kube)
    for token, obj in (
        ("node", node),
        ("kubenode", kube),
        ("instancemanager", im),
        ("pod", pod),
        ("setting", setting("priority-class", "high")),
    ):
        group, plural, _ = _PLACES[token]
        raw = msgspec.to_builtins(obj)
        raw["apiVersion"] = f"{group}/v1beta2" if group else "v1"
        emulator.load(group, plural, [raw])


_NAMES = {"node": "node-1", "kubenode": "node-1", "setting": "priority-class"}


def _decide(emulator: Emulator) -> list[Command]:
    """im-restart's decision on the cluster as the emulator holds it now."""
    decider = ImRestartDecider(Clock(time.time()))
    for token, (group, plural, struct) in _PLACES.items():
        raw = emulator.get(group, plural, NS, _NAMES.get(token, "im-1"))
        assert raw is not None, token
        obj: Any = msgspec.convert(raw, struct)
        meta = obj.metadata
        decider.apply(
            ObjectEvent(
                type=EventType.ADDED,
                kind=token,
                namespace=meta.namespace,
                name=meta.name,
                uid=meta.uid,
                resource_version=meta.resource_version,
                object=obj,
            )
        )
    for token in sorted(READS):
        decider.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=NS, name=""))
    return decider.decide()


def _start_replica(emulator: Emulator) -> None:
    """Longhorn's instance handler starts a replica on the IM: its status lists it `starting`."""
    raw = emulator.get("longhorn.io", "instancemanagers", NS, "im-1")
    assert raw is not None
    raw["status"]["instanceReplicas"] = {"r-1": {"spec": {"name": "r-1"}, "status": {"state": "starting"}}}
    emulator.load("longhorn.io", "instancemanagers", [raw])


async def test_a_pod_delete_is_refused_once_its_instance_manager_starts_an_instance(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    _seed(emulator)
    deletes = [c for c in _decide(emulator) if c.verb is Verb.DELETE]
    assert [c.target.name for c in deletes] == ["im-1"], "an idle IM whose pod lags a setting is restarted"
    _start_replica(emulator)  # after the decision, before the actuator gets the command
    result = await make_actuator().execute(deletes[0])
    assert result.outcome is Outcome.PRECONDITION_FAILED, result.detail
    assert "instanceReplicas/r-1" in result.detail and "starting" in result.detail, result.detail
    assert emulator.get("", "pods", NS, "im-1") is not None, "the busy IM's pod stays"


async def test_the_same_delete_applies_while_the_instance_manager_stays_idle(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    _seed(emulator)
    deletes = [c for c in _decide(emulator) if c.verb is Verb.DELETE]
    assert len(deletes) == 1
    # Someone else's write to the IM (a condition, say) is no reason to refuse: only its instances are.
    raw = emulator.get("longhorn.io", "instancemanagers", NS, "im-1")
    assert raw is not None
    raw["status"]["instanceReplicas"] = {"r-1": {"status": {"state": "stopped"}}}
    emulator.load("longhorn.io", "instancemanagers", [raw])
    result = await make_actuator().execute(deletes[0])
    assert result.outcome is Outcome.APPLIED, result.detail
    assert emulator.get("", "pods", NS, "im-1") is None


async def test_a_related_object_outside_the_target_namespace_is_not_read(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """A result quotes what it read: a related precondition cannot read beyond the policy."""
    _seed(emulator)
    [delete] = [c for c in _decide(emulator) if c.verb is Verb.DELETE]
    [idle] = [r for r in delete.related if r.target.kind == "InstanceManager"]
    elsewhere = msgspec.structs.replace(
        idle, target=msgspec.structs.replace(idle.target, namespace="kube-system")
    )
    forged = new_command(
        service=delete.service,
        verb=delete.verb,
        target=delete.target,
        preconditions=delete.preconditions,
        related=(elsewhere,),
        reason=delete.reason,
        created_at=delete.created_at,
    )
    result = await make_actuator().execute(forged)
    assert result.outcome is Outcome.PRECONDITION_FAILED, result.detail
    assert "not in the target's namespace" in result.detail
    assert emulator.get("", "pods", NS, "im-1") is not None
