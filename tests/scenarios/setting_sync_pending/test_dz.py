"""DZ-02/03 and bad values in the sandbox: a group-A setting changed while a volume is attached stays
pending (applied=false, a Warning Event naming the volume, no instance-manager pod touched), and is
applied on the detach without any re-apply; a value written around the webhook (straight into the
emulator's store) is reported and never applied. Invariants hold at every observation: no IM pod is
deleted while a volume is attached, and `applied` never says true while a pod carries the old value."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.fixtures.sandbox import GROUP, Sandbox
from tests.scenarios.setting_sync_pending.conftest import Running

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

IM = "longhorn.io/component=instance-manager"


async def im_pods(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    answer = await sandbox.core.list_namespaced_pod(sandbox.namespace, label_selector=IM)
    return {p.metadata.name: sandbox.api.sanitize_for_serialization(p) for p in answer.items}


async def setting(sandbox: Sandbox, name: str) -> dict[str, Any]:
    return await sandbox.get("settings", name)


async def events_of(sandbox: Sandbox, setting_name: str) -> list[dict[str, Any]]:
    answer = await sandbox.core.list_namespaced_event(sandbox.namespace)
    events = [sandbox.api.sanitize_for_serialization(e) for e in answer.items]
    return [e for e in events if e["involvedObject"].get("name") == setting_name]


async def attach(sandbox: Sandbox, name: str, node: str) -> None:
    await sandbox.create_volume(name, node=node)
    await sandbox.wait_volume(name, lambda v: v.get("status", {}).get("state") == "attached", within=30)


async def test_dz02_03_a_priority_class_waits_for_the_detach_then_applies(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    await attach(sandbox, "pvc-a", "node-1")
    before = await im_pods(sandbox)
    assert before, "the sandbox runs an instance-manager pod per node"
    attached = {"pvc-a"}
    judged = []  # the status was written for the new value (the old value's `true` is stale until then)

    async def invariant() -> None:
        pods = await im_pods(sandbox)
        if attached:  # no IM pod is deleted (or replaced) while a volume is attached
            assert {n: p["metadata"]["uid"] for n, p in pods.items()} == {
                n: p["metadata"]["uid"] for n, p in before.items()
            }
        applied = (await setting(sandbox, "priority-class")).get("status", {}).get("applied")
        if applied is False:
            judged.append(True)
        elif judged:  # `applied` never says true while an IM pod carries the old class
            old = [
                n for n, p in pods.items() if p["spec"].get("priorityClassName") != "system-cluster-critical"
            ]
            assert not old, old

    await sandbox.set_setting("priority-class", "system-cluster-critical")

    async def pending_with_event() -> list[dict[str, Any]] | None:
        s = await setting(sandbox, "priority-class")
        if s.get("status", {}).get("applied") is not False:
            return None
        return [
            e for e in await events_of(sandbox, "priority-class") if e["reason"] == "AttachedVolumes"
        ] or None

    [event] = await sandbox.wait_for(
        pending_with_event, within=30, what="applied=false and the Event", invariant=invariant
    )
    assert (event["type"], event["message"]) == ("Warning", "1 attached volume: pvc-a")

    await sandbox.patch("volumes", "pvc-a", {"spec": {"nodeID": ""}})
    await sandbox.wait_volume("pvc-a", lambda v: v.get("status", {}).get("state") == "detached", within=30)
    attached.clear()

    async def applied() -> bool:
        return (await setting(sandbox, "priority-class")).get("status", {}).get("applied") is True

    await sandbox.wait_for(applied, within=30, what="applied=true after the detach", invariant=invariant)

    # applied means the stale pods were deleted (Longhorn's sync); the IM controller then recreates them
    async def recreated() -> dict[str, Any] | None:
        pods = await im_pods(sandbox)
        return pods if pods.keys() == before.keys() else None

    pods = await sandbox.wait_for(recreated, within=30, what="an IM pod per node again", invariant=invariant)
    assert {p["spec"].get("priorityClassName") for p in pods.values()} == {"system-cluster-critical"}
    assert not {p["metadata"]["uid"] for p in pods.values()} & {p["metadata"]["uid"] for p in before.values()}


BAD_VALUES = {
    "taint-toleration": ("key1=value1:NoSchedule; key2:InvalidEffect", "invalid effect"),
    "system-managed-components-node-selector": ("kubernetes.io/hostname=node-1", "separator ':'"),
    "storage-network": ("a/b/c", "storage-network"),
    "engine-image-pod-liveness-probe-period": ("0", "should be larger than or equal to 1"),
}


async def test_values_written_around_the_webhook_are_reported_and_never_applied(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    before = {n: p["metadata"]["uid"] for n, p in (await im_pods(sandbox)).items()}
    for name, (value, _) in BAD_VALUES.items():
        stored = sandbox.emulator.get(GROUP, "settings", sandbox.namespace, name)
        assert stored is not None
        # Straight into the store: no admission, as a bypassed webhook or a corrupt restore would.
        sandbox.emulator.load(GROUP, "settings", [{**stored, "value": value, "status": {"applied": True}}])

    async def reported(name: str) -> list[dict[str, Any]] | None:
        s = await setting(sandbox, name)
        if s.get("status", {}).get("applied") is not False:
            return None
        return [e for e in await events_of(sandbox, name) if e["reason"] == "InvalidValue"] or None

    async def same_pods() -> bool:
        return {n: p["metadata"]["uid"] for n, p in (await im_pods(sandbox)).items()} == before

    async def untouched() -> None:
        assert await same_pods(), "an instance-manager pod was replaced for an invalid value"

    for name, (_, message) in BAD_VALUES.items():
        [event] = await sandbox.wait_for(
            functools.partial(reported, name), within=30, what=f"{name} reported invalid", invariant=untouched
        )
        assert event["type"] == "Warning" and message in event["message"], event["message"]
    # Nothing was applied, and the bad values block nothing else: a valid setting still applies.
    await sandbox.set_setting("priority-class", "system-cluster-critical")

    async def valid_applied() -> bool:
        pods = await im_pods(sandbox)
        s = await setting(sandbox, "priority-class")
        return bool(s.get("status", {}).get("applied")) and all(
            p["spec"].get("priorityClassName") == "system-cluster-critical" for p in pods.values()
        )

    await sandbox.wait_for(valid_applied, within=30, what="the valid priority class applied")
    for name in BAD_VALUES:
        assert (await setting(sandbox, name))["status"]["applied"] is False
