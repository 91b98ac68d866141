"""im-restart's commands as the actuator applies them to the sandbox's API emulator: the
SettingSynced condition appended, then patched in place on the status subresource, and an IM pod
deleted; each refused when the object moved on since the decision, or is no IM pod."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from corral_im_restart.commands import delete_pod, patch_condition, rfc3339
from corral_im_restart.judge import synced_condition
from corral_model import longhorn as lh
from corral_model.envelopes import FieldValue, Outcome, Target, Verb, new_command
from corral_sandbox.emulator import Emulator
from tests.integration.actuator.conftest import NS, MakeActuator

pytestmark = pytest.mark.integration


def _seed(emulator: Emulator, labels: dict[str, str] | None = None) -> None:
    emulator.load(
        "longhorn.io",
        "instancemanagers",
        [
            {
                "apiVersion": "longhorn.io/v1beta2",
                "kind": "InstanceManager",
                "metadata": {"name": "im-1", "namespace": NS},
                "spec": {"nodeID": "node-1", "dataEngine": "v1"},
                "status": {"currentState": "running", "conditions": [{"type": "PodReady", "status": "True"}]},
            }
        ],
    )
    emulator.load(
        "",
        "pods",
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "im-1",
                    "namespace": NS,
                    "labels": {"longhorn.io/component": "instance-manager"} if labels is None else labels,
                },
                "spec": {"nodeName": "node-1", "containers": [{"name": "instance-manager", "image": "im"}]},
            }
        ],
    )
    emulator.write_log.clear()


def _touch(emulator: Emulator, group: str, plural: str) -> None:
    """Someone else's write since the decision: a new resourceVersion."""
    obj = emulator.get(group, plural, NS, "im-1")
    assert obj is not None
    obj["metadata"].setdefault("annotations", {})["touched"] = str(time.monotonic())
    emulator.load(group, plural, [obj])


def _read(emulator: Emulator, group: str, plural: str, struct: Any) -> Any:
    obj = emulator.get(group, plural, NS, "im-1")
    assert obj is not None
    return msgspec.convert(obj, struct)


async def test_the_condition_is_appended_then_patched_in_place(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    _seed(emulator)
    actuator = make_actuator()
    im = _read(emulator, "longhorn.io", "instancemanagers", lh.InstanceManager)
    lagging = synced_condition(("priority-class",), hugepage_blocked=False)
    result = await actuator.execute(patch_condition(im, lagging, time.time()))
    assert result.outcome is Outcome.APPLIED, result.detail
    assert [r.subresource for r in emulator.write_log.records(verb="patch")] == ["status"]
    im = _read(emulator, "longhorn.io", "instancemanagers", lh.InstanceManager)
    assert [(c.type, c.status, c.message) for c in im.status.conditions] == [
        ("PodReady", "True", ""),
        ("SettingSynced", "False", "Settings [priority-class] are not synced"),
    ]
    # The IM status moved on since this decision: refused, nothing written.
    stale = patch_condition(im, synced_condition((), hugepage_blocked=False), time.time() + 1)
    _touch(emulator, "longhorn.io", "instancemanagers")
    assert (await actuator.execute(stale)).outcome is Outcome.PRECONDITION_FAILED
    im = _read(emulator, "longhorn.io", "instancemanagers", lh.InstanceManager)
    assert im.status.conditions[1].status == "False"  # the refused patch wrote nothing
    at = time.time() + 1
    result = await actuator.execute(patch_condition(im, synced_condition((), hugepage_blocked=False), at))
    assert result.outcome is Outcome.APPLIED, result.detail
    im = _read(emulator, "longhorn.io", "instancemanagers", lh.InstanceManager)
    synced = im.status.conditions[1]
    assert (synced.type, synced.status, synced.message) == ("SettingSynced", "True", "")
    assert synced.last_transition_time == rfc3339(at)


async def test_an_im_pod_is_deleted_only_as_it_was_judged(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    _seed(emulator)
    actuator = make_actuator()
    judged = _read(emulator, "", "pods", lh.Pod)
    _touch(emulator, "", "pods")
    assert (await actuator.execute(delete_pod(judged, "settings-unsynced", time.time()))).outcome is (
        Outcome.PRECONDITION_FAILED
    )
    fresh = _read(emulator, "", "pods", lh.Pod)
    result = await actuator.execute(delete_pod(fresh, "settings-unsynced", time.time()))
    assert result.outcome is Outcome.APPLIED, result.detail
    assert emulator.get("", "pods", NS, "im-1") is None


async def test_a_pod_that_is_no_instance_manager_is_refused_by_policy(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    _seed(emulator, labels={"app": "workload"})
    pod = _read(emulator, "", "pods", lh.Pod)
    result = await make_actuator().execute(delete_pod(pod, "settings-unsynced", time.time()))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert emulator.get("", "pods", NS, "im-1") is not None


async def test_a_forged_label_precondition_does_not_delete_a_pod_that_is_no_instance_manager(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """The command claims the label; the live pod does not carry it: the policy's `require` is
    tested on the object itself, atomically, so the pod stays."""
    _seed(emulator, labels={"app": "workload"})
    pod = _read(emulator, "", "pods", lh.Pod)
    forged = msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(pod.metadata, labels={"longhorn.io/component": "instance-manager"}),
    )
    result = await make_actuator().execute(delete_pod(forged, "settings-unsynced", time.time()))
    assert result.outcome is not Outcome.APPLIED, result.detail
    assert emulator.get("", "pods", NS, "im-1") is not None


async def test_nothing_outside_the_longhorn_namespace_nor_beyond_the_condition(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """An IM pod in another namespace, an IM status field other than the conditions, the IM itself:
    all refused by policy, and nothing written."""
    _seed(emulator)
    actuator = make_actuator()
    pod = _read(emulator, "", "pods", lh.Pod)
    elsewhere = msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, namespace="default")
    )
    result = await actuator.execute(delete_pod(elsewhere, "settings-unsynced", time.time()))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    im = _read(emulator, "longhorn.io", "instancemanagers", lh.InstanceManager)
    target = Target(kind="InstanceManager", namespace=NS, name="im-1")
    for command in (
        new_command(
            service="im-restart",
            verb=Verb.PATCH_STATUS,
            target=target,
            changes=(FieldValue(path="/status/currentState", value="error"),),
            preconditions=(FieldValue(path="/metadata/resourceVersion", value=im.metadata.resource_version),),
        ),
        new_command(service="im-restart", verb=Verb.DELETE, target=target),
        new_command(
            service="im-restart",
            verb=Verb.PATCH,
            target=Target(kind="Pod", namespace=NS, name="im-1"),
            changes=(FieldValue(path="/spec/priorityClassName", value="x"),),
        ),
    ):
        assert (await actuator.execute(command)).outcome is Outcome.REJECTED_BY_POLICY, command
    assert list(emulator.write_log) == [], "every command refused before any write"
    assert emulator.get("", "pods", NS, "im-1") is not None
    assert emulator.get("longhorn.io", "instancemanagers", NS, "im-1")["status"]["currentState"] == "running"  # type: ignore[index]
