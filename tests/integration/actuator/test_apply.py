"""Every outcome of one command, produced for real against the sandbox's API emulator over HTTP.

The emulator's write log is the oracle for "what reached the cluster": a test asserts the number of
writes that changed something, not what the actuator says it did.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_actuator.api import RetryPolicy
from corral_decision.events import EventType, event_command
from corral_model.envelopes import Command, FieldValue, Outcome, Target, Verb, new_command
from corral_sandbox.emulator import Emulator
from tests.integration.actuator.conftest import (
    DEFAULT_IMAGE,
    NS,
    OLD_IMAGE,
    MakeActuator,
    SecurityEvents,
    seed_cluster,
    upgrade,
    volume,
)

pytestmark = pytest.mark.integration


def changed_writes(emulator: Emulator, **filters: Any) -> int:
    return sum(1 for r in emulator.write_log.records(**filters) if r.changed and not r.dry_run)


def image_of(emulator: Emulator, name: str) -> Any:
    obj = emulator.get("longhorn.io", "volumes", NS, name)
    assert obj is not None
    return obj["spec"]["image"]


async def test_applied_with_the_resource_version_after_the_write(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    result = await make_actuator().execute(upgrade("vol-0"))
    assert result.outcome is Outcome.APPLIED, result.detail
    stored = emulator.get("longhorn.io", "volumes", NS, "vol-0")
    assert stored is not None and stored["spec"]["image"] == DEFAULT_IMAGE
    assert result.resource_version == stored["metadata"]["resourceVersion"]
    assert [r.patch_type for r in emulator.write_log.records(verb="patch")] == ["json"]
    assert changed_writes(emulator) == 1


async def test_stale_precondition_is_refused_not_applied(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    emulator.load("longhorn.io", "volumes", [volume("vol-0", image="someone/else:v9")])
    emulator.write_log.clear()
    result = await make_actuator().execute(upgrade("vol-0"))
    assert result.outcome is Outcome.PRECONDITION_FAILED
    assert result.detail == "/spec/image: another value, not what the command expected"
    assert image_of(emulator, "vol-0") == "someone/else:v9"
    assert changed_writes(emulator) == 0


async def test_unrelated_changes_do_not_conflict(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    changed = volume("vol-0")
    changed["spec"]["numberOfReplicas"] = 5  # someone else's write since the decision
    emulator.load("longhorn.io", "volumes", [changed])
    result = await make_actuator().execute(upgrade("vol-0"))
    assert result.outcome is Outcome.APPLIED
    stored = emulator.get("longhorn.io", "volumes", NS, "vol-0")
    assert stored is not None and stored["spec"]["numberOfReplicas"] == 5


async def test_a_change_that_already_holds_is_applied_without_a_write(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    actuator = make_actuator()
    first = await actuator.execute(upgrade("vol-0"))
    assert first.outcome is Outcome.APPLIED
    emulator.write_log.clear()
    again = await actuator.execute(upgrade("vol-0"))
    assert again.outcome is Outcome.APPLIED
    assert "already held" in again.detail
    assert again.resource_version == first.resource_version
    redelivered = await actuator.execute(upgrade("vol-0"), redelivered=True)
    assert redelivered.outcome is Outcome.APPLIED
    assert changed_writes(emulator) == 0


async def test_missing_object_is_not_found(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    result = await make_actuator().execute(upgrade("no-such-volume"))
    assert result.outcome is Outcome.NOT_FOUND


async def test_throttling_is_retried_until_it_passes(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator, volumes=10)
    emulator.faults.update({"throttle_rate": 0.5, "retry_after_s": 0, "plurals": ["volumes"], "seed": 7})
    actuator = make_actuator(retry=RetryPolicy(attempts=20, timeout=20, wait_initial=0.001, wait_max=0.01))
    results = [await actuator.execute(upgrade(f"vol-{i}")) for i in range(10)]
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 10
    assert actuator.api.retries > 0
    assert changed_writes(emulator, plural="volumes") == 10


async def test_persistent_server_errors_end_in_error(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    emulator.faults.update({"error_rate": 1.0})
    actuator = make_actuator()
    result = await actuator.execute(upgrade("vol-0"))
    assert result.outcome is Outcome.ERROR
    assert "500" in result.detail
    assert actuator.api.retries == 3  # four attempts in all
    emulator.faults.reset()
    assert (await actuator.execute(upgrade("vol-0"))).outcome is Outcome.APPLIED


async def test_persistent_throttling_ends_in_error(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    emulator.faults.update({"throttle_rate": 1.0, "retry_after_s": 0})
    result = await make_actuator().execute(upgrade("vol-0"))
    assert result.outcome is Outcome.ERROR
    assert "429" in result.detail


async def test_slow_answers_time_out_and_are_retried(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    emulator.faults.update({"write_latency_s": 0.5})
    actuator = make_actuator(
        request_timeout=0.1, retry=RetryPolicy(attempts=2, wait_initial=0.01, wait_max=0.01)
    )
    result = await actuator.execute(upgrade("vol-0"))
    assert result.outcome is Outcome.ERROR
    assert "no answer within" in result.detail
    emulator.faults.update({"write_latency_s": 0.05})
    slow = await actuator.execute(upgrade("vol-1"))
    assert slow.outcome is Outcome.APPLIED


async def test_outside_policy_is_rejected_and_never_reaches_the_api(
    emulator: Emulator, make_actuator: MakeActuator, security_events: SecurityEvents
) -> None:
    seed_cluster(emulator)
    actuator = make_actuator()
    evil = upgrade("vol-0", to="evil/engine:latest")
    result = await actuator.execute(evil)
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert security_events.events == [(evil.id, result.detail)]
    assert len(emulator.write_log) == 0
    assert image_of(emulator, "vol-0") == OLD_IMAGE


async def test_dry_run_validates_but_stores_nothing(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    result = await make_actuator(dry_run=True).execute(upgrade("vol-0"))
    assert result.outcome is Outcome.APPLIED and result.dry_run
    assert image_of(emulator, "vol-0") == OLD_IMAGE
    assert [r.dry_run for r in emulator.write_log.records(verb="patch")] == [True]


def _pod(name: str, component: str, uid: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"longhorn.io/component": component}}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "node-1"}}


IM_LABEL = FieldValue(path="/metadata/labels/longhorn.io~1component", value="instance-manager")


def _delete_pod(name: str, uid: str = "", labelled: bool = True) -> Command:
    """im-restart's delete: it says it means an instance-manager pod (the policy requires that)."""
    return new_command(
        service="im-restart",
        verb=Verb.DELETE,
        target=Target(kind="Pod", namespace=NS, name=name, uid=uid),
        preconditions=(IM_LABEL,) if labelled else (),
    )


async def test_delete_instance_manager_pod_with_uid_precondition(
    emulator: Emulator, make_actuator: MakeActuator, security_events: SecurityEvents
) -> None:
    emulator.load("", "pods", [_pod("instance-manager-a", "instance-manager"), _pod("csi-x", "csi-plugin")])
    stored = emulator.get("", "pods", NS, "instance-manager-a")
    assert stored is not None
    uid = stored["metadata"]["uid"]
    actuator = make_actuator()

    recreated = await actuator.execute(_delete_pod("instance-manager-a", uid="an-older-uid"))
    assert recreated.outcome is Outcome.PRECONDITION_FAILED and "recreated" in recreated.detail

    not_ours = await actuator.execute(_delete_pod("csi-x"))
    assert not_ours.outcome is Outcome.REJECTED_BY_POLICY
    assert security_events.events and emulator.get("", "pods", NS, "csi-x") is not None
    unsaid = await actuator.execute(_delete_pod("instance-manager-a", uid=uid, labelled=False))
    assert unsaid.outcome is Outcome.REJECTED_BY_POLICY
    assert "must carry a precondition on /metadata/labels/longhorn.io~1component" in unsaid.detail

    done = await actuator.execute(_delete_pod("instance-manager-a", uid=uid))
    assert done.outcome is Outcome.APPLIED
    assert emulator.get("", "pods", NS, "instance-manager-a") is None
    assert (await actuator.execute(_delete_pod("instance-manager-a", uid=uid))).outcome is Outcome.NOT_FOUND


async def test_create_is_idempotent_by_name(emulator: Emulator, make_actuator: MakeActuator) -> None:
    body = {"spec": {"nodeID": "node-1", "dataEngine": "v2", "instanceManagerImage": "im:v2"}}

    def create(spec: dict[str, Any]) -> Command:
        return new_command(
            service="v2-upgrade",
            verb=Verb.CREATE,
            target=Target(kind="NodeDataEngineUpgrade", namespace=NS, name="node-1-upgrade"),
            body={"metadata": {"name": "node-1-upgrade"}, **spec},
        )

    actuator = make_actuator()
    first = await actuator.execute(create(body))
    assert first.outcome is Outcome.APPLIED and first.resource_version
    again = await actuator.execute(create(body))
    assert again.outcome is Outcome.APPLIED and "already existed" in again.detail
    other = await actuator.execute(create({"spec": {"nodeID": "node-2"}}))
    assert other.outcome is Outcome.PRECONDITION_FAILED
    assert emulator.write_log.count(verb="create", plural="nodedataengineupgrades") == 1


async def test_the_gates_events_are_created_in_a_corral_components_name(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    event = new_command(
        service="upgrade-gate",
        verb=Verb.CREATE,
        target=Target(kind="Event", namespace=NS, name="longhorn-upgrade.check-1"),
        body={
            "metadata": {"name": "longhorn-upgrade.check-1"},
            "involvedObject": {"kind": "Setting", "name": "current-longhorn-version", "namespace": NS},
            "reason": "FailedUpgradePreCheck",
            "message": "upgrading from v1.8.0 to v1.10.0 is not supported",
            "type": "Warning",
            "source": {"component": "corral-watcher"},
        },
    )
    result = await make_actuator().execute(event)
    assert result.outcome is Outcome.APPLIED, result.detail
    stored = emulator.get("", "events", NS, "longhorn-upgrade.check-1")
    assert stored is not None and stored["reason"] == "FailedUpgradePreCheck"


async def test_an_event_asked_for_again_later_is_the_recorded_event_counted_again(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """A crash-looping service's gate asks for its (deterministically named) Event at every start,
    with new timestamps: that is the Event already recorded, counted once more as Kubernetes' own
    recorder does (count, lastTimestamp), not a conflicting object and not a second Event."""

    def event(stamp: str, message: str = "blocked") -> Command:
        return new_command(
            service="upgrade-gate",
            verb=Verb.CREATE,
            target=Target(kind="Event", namespace=NS, name="current-longhorn-version.abc"),
            body={
                "metadata": {"name": "current-longhorn-version.abc"},
                "involvedObject": {"kind": "Setting", "name": "current-longhorn-version", "namespace": NS},
                "reason": "FailedUpgradePreCheck",
                "message": message,
                "type": "Warning",
                "source": {"component": "corral-engine-upgrade"},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            },
        )

    def stored() -> dict[str, Any]:
        found = emulator.get("", "events", NS, "current-longhorn-version.abc")
        assert found is not None
        return found

    actuator = make_actuator()
    assert (await actuator.execute(event("2026-11-21T10:00:00Z"))).outcome is Outcome.APPLIED
    again = await actuator.execute(event("2026-11-21T10:05:00Z"))
    assert again.outcome is Outcome.APPLIED and "counted again" in again.detail
    assert (stored()["count"], stored()["firstTimestamp"], stored()["lastTimestamp"]) == (
        2,
        "2026-11-21T10:00:00Z",
        "2026-11-21T10:05:00Z",
    )
    # The same occurrence delivered again (or an older one) is already recorded: nothing written.
    redelivered = await actuator.execute(event("2026-11-21T10:05:00Z"))
    assert redelivered.outcome is Outcome.APPLIED and "already existed" in redelivered.detail
    assert (await actuator.execute(event("2026-11-21T10:01:00Z"))).outcome is Outcome.APPLIED
    assert stored()["count"] == 2
    # Another message under the same name is another Event: refused, not overwritten.
    other = await actuator.execute(event("2026-11-21T10:06:00Z", message="something else"))
    assert other.outcome is Outcome.PRECONDITION_FAILED
    assert emulator.write_log.count(verb="create", plural="events") == 1
    assert stored()["count"] == 2 and stored()["message"] == "blocked"


async def test_status_goes_through_the_status_subresource(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    command = new_command(
        service="setting-sync",
        verb=Verb.PATCH_STATUS,
        target=Target(kind="Setting", namespace=NS, name="default-engine-image"),
        changes=(FieldValue(path="/status/applied", value=True),),
        preconditions=(
            FieldValue(path="/status/applied", value=False),
            FieldValue(path="/value", value=DEFAULT_IMAGE),
        ),
    )
    result = await make_actuator().execute(command)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert [r.subresource for r in emulator.write_log.records(verb="patch")] == ["status"]
    stored = emulator.get("longhorn.io", "settings", NS, "default-engine-image")
    assert stored is not None and stored["status"]["applied"] is True


async def test_missing_parents_and_absent_preconditions_are_handled_from_a_read(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "longhorn-csi-plugin", "namespace": NS},
        "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": "m"}]}}},
    }
    emulator.load("apps", "daemonsets", [daemonset])
    emulator.write_log.clear()
    loaded = emulator.get("apps", "daemonsets", NS, "longhorn-csi-plugin")
    assert loaded is not None
    version = FieldValue(path="/metadata/resourceVersion", value=loaded["metadata"]["resourceVersion"])
    annotation = "/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations"
    tolerations = [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]

    def sync(pre: tuple[FieldValue, ...]) -> Command:
        return new_command(
            service="setting-sync",
            verb=Verb.PATCH,
            target=Target(kind="DaemonSet", namespace=NS, name="longhorn-csi-plugin"),
            changes=(
                FieldValue(path="/spec/template/spec/tolerations", value=tolerations),
                FieldValue(path=annotation, value='[{"key":"k"}]'),
            ),
            preconditions=pre,
        )

    actuator = make_actuator()
    # No annotations map yet: the plain patch cannot add to it; the actuator rebuilds it from a read.
    result = await actuator.execute(
        sync((version, FieldValue(path="/spec/template/spec/tolerations", value=None)))
    )
    assert result.outcome is Outcome.APPLIED, result.detail
    stored = emulator.get("apps", "daemonsets", NS, "longhorn-csi-plugin")
    assert stored is not None
    assert stored["spec"]["template"]["metadata"]["annotations"] == {
        "longhorn.io/last-applied-tolerations": '[{"key":"k"}]'
    }
    assert stored["spec"]["template"]["spec"]["tolerations"] == tolerations
    assert changed_writes(emulator) == 1
    # The "absent" precondition no longer holds for a different change.
    stale = new_command(
        service="setting-sync",
        verb=Verb.PATCH,
        target=Target(kind="DaemonSet", namespace=NS, name="longhorn-csi-plugin"),
        changes=(FieldValue(path="/spec/template/spec/priorityClassName", value="high"),),
        preconditions=(version, FieldValue(path="/spec/template/spec/tolerations", value=None)),
    )
    assert (await actuator.execute(stale)).outcome is Outcome.PRECONDITION_FAILED


async def test_v2_rules_only_touch_v2_volumes(
    emulator: Emulator, make_actuator: MakeActuator, security_events: SecurityEvents
) -> None:
    emulator.load("longhorn.io", "volumes", [volume("v1-vol"), volume("v2-vol", data_engine="v2")])
    emulator.write_log.clear()

    def live_upgrade(name: str) -> Command:
        read = emulator.get("longhorn.io", "volumes", NS, name)
        assert read is not None
        return new_command(
            service="v2-upgrade",
            verb=Verb.PATCH,
            target=Target(kind="Volume", namespace=NS, name=name),
            changes=(FieldValue(path="/spec/targetNodeIDForLiveUpgrade", value="node-1"),),
            # What v2-upgrade's commands carry: the version read, and that the volume is v2.
            preconditions=(
                FieldValue(path="/metadata/resourceVersion", value=read["metadata"]["resourceVersion"]),
                FieldValue(path="/spec/dataEngine", value="v2"),
            ),
        )

    actuator = make_actuator()
    assert (await actuator.execute(live_upgrade("v2-vol"))).outcome is Outcome.APPLIED
    refused = await actuator.execute(live_upgrade("v1-vol"))
    assert refused.outcome is Outcome.REJECTED_BY_POLICY and "dataEngine" in refused.detail
    assert len(security_events.events) == 1
    assert changed_writes(emulator) == 1


async def test_a_decision_services_volume_event_is_one_event_counted_per_occurrence(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """The kit's Event commands (corral_decision.events): each occurrence its own command id, all
    of them one Event on the Volume, its count the number of occurrences."""
    volume = Target(kind="Volume", namespace=NS, name="pvc-a")

    def blocked(now: float) -> Command:
        return event_command(
            service="engine-upgrade",
            about=volume,
            type_=EventType.WARNING,
            reason="EngineUpgradeBlocked",
            message="automatic engine upgrade to longhornio/longhorn-engine:v1.10.1 blocked: degraded",
            now=now,
        )

    first, second, third = blocked(1_800_000_000), blocked(1_800_000_060), blocked(1_800_000_600)
    assert len({first.id, second.id, third.id}) == 3 and first.target == third.target
    actuator = make_actuator()
    for command in (first, second, second, third):
        result = await actuator.execute(command)
        assert result.outcome is Outcome.APPLIED, result.detail
    stored = emulator.get("", "events", NS, first.target.name)
    assert stored is not None
    assert stored["count"] == 3
    assert stored["involvedObject"] == {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Volume",
        "namespace": NS,
        "name": "pvc-a",
    }
    assert stored["lastTimestamp"] == "2027-01-15T08:10:00Z" and stored["type"] == "Warning"
    assert emulator.write_log.count(verb="create", plural="events") == 1
