"""The actuator holds engine-upgrade's rules on the volume itself, whoever sends the command.

Issue 29's probe, holding only engine-upgrade's credentials, upgraded all 9 volumes of a node at once
against a limit of 2, and a degraded volume live. Every command here is well-formed and carries the
preconditions the policy requires, so only the invariants (corral_actuator.engine_upgrade_guard)
can refuse it, each by name.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import pytest

from corral_actuator.engine_upgrade_guard import LIMIT_SETTING
from corral_decision.pod_delete import guarded_pod_delete
from corral_model import longhorn as lh
from corral_model.envelopes import Command, FieldValue, Outcome, Target, Verb, new_command
from corral_sandbox.emulator import Emulator
from corral_sandbox.emulator.errors import too_many_requests
from tests.integration.actuator.conftest import (
    DEFAULT_IMAGE,
    NS,
    OLD_IMAGE,
    MakeActuator,
    SecurityEvents,
    seed_cluster,
    setting,
    upgrade,
    volume,
)

pytestmark = pytest.mark.integration


def _limit(emulator: Emulator, value: str) -> None:
    emulator.load("longhorn.io", "settings", [setting(LIMIT_SETTING, value)])


def _volume(name: str, **status: Any) -> dict[str, Any]:
    v = volume(name)
    v["status"].update(status)
    return v


async def test_the_per_node_limit_holds_and_a_finished_upgrade_frees_its_slot(
    emulator: Emulator, make_actuator: MakeActuator, security_events: SecurityEvents
) -> None:
    seed_cluster(emulator, volumes=9)  # all nine owned by node-1, detached
    _limit(emulator, "2")
    actuator = make_actuator()
    results = [await actuator.execute(upgrade(f"vol-{i}")) for i in range(9)]
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 2 + [Outcome.REJECTED_BY_POLICY] * 7
    assert results[2].detail == (
        "per-node limit: 2 upgrades already in flight on owner node node-1 (vol-0, vol-1), limit 2"
    )
    assert len(security_events.events) == 7
    # vol-0's upgrade finishes (the volume controller sets currentImage): its slot is free again,
    # found by reading the volumes counted, not after some cache expires.
    done = volume("vol-0", image=DEFAULT_IMAGE)
    emulator.load("longhorn.io", "volumes", [done])
    assert (await actuator.execute(upgrade("vol-2"))).outcome is Outcome.APPLIED
    assert (await actuator.execute(upgrade("vol-3"))).outcome is Outcome.REJECTED_BY_POLICY


async def test_upgrades_in_flight_before_the_actuator_started_count(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator, volumes=3)
    _limit(emulator, "1")
    in_flight = volume("vol-0")
    in_flight["spec"]["image"] = DEFAULT_IMAGE  # someone else started it
    emulator.load("longhorn.io", "volumes", [in_flight])
    result = await make_actuator().execute(upgrade("vol-1"))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert "1 upgrades already in flight on owner node node-1 (vol-0)" in result.detail


@pytest.mark.parametrize(
    ("status", "spec", "reason"),
    [
        ({"state": "attached", "robustness": "degraded"}, {}, "a live upgrade needs a healthy volume"),
        ({"state": "attached", "robustness": "healthy", "isStandby": True}, {}, "DR standby"),
        ({"state": "attached", "robustness": "healthy", "expansionRequired": True}, {}, "expanding"),
        ({"state": "attached", "robustness": "healthy"}, {"migrationNodeID": "node-2"}, "migrating"),
        ({"state": "attached", "robustness": "healthy"}, {"dataLocality": "strict-local"}, "strict-local"),
        ({"state": "attaching"}, {}, "neither detached"),
        ({"state": "detached"}, {"dataEngine": "v2"}, "v2 volume"),
    ],
)
async def test_a_volume_longhorn_would_not_upgrade_is_refused_by_name(
    emulator: Emulator,
    make_actuator: MakeActuator,
    status: dict[str, Any],
    spec: dict[str, Any],
    reason: str,
) -> None:
    seed_cluster(emulator, volumes=0)
    v = _volume("vol-x", **status)
    v["spec"].update(spec)
    emulator.load("longhorn.io", "volumes", [v])
    emulator.write_log.clear()
    result = await make_actuator().execute(upgrade("vol-x"))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert result.detail.startswith("engine-upgrade eligibility: ") and reason in result.detail
    assert not [r for r in emulator.write_log.records(name="vol-x") if r.verb == "patch"]


@pytest.mark.parametrize("value", ["0", "-1", "not-a-number"])
async def test_with_longhorns_limit_off_corrals_own_limit_holds(
    emulator: Emulator, make_actuator: MakeActuator, value: str
) -> None:
    """engine-upgrade in modes auto and act upgrades while Longhorn's loop is off (its limit 0),
    with corral's own per-node limit: the actuator holds that one then."""
    seed_cluster(emulator, volumes=2)
    _limit(emulator, value)
    actuator = make_actuator(engine_upgrade_limit=1)
    assert (await actuator.execute(upgrade("vol-0"))).outcome is Outcome.APPLIED
    second = await actuator.execute(upgrade("vol-1"))
    assert second.outcome is Outcome.REJECTED_BY_POLICY
    assert (
        "per-node limit: 1 upgrades already in flight on owner node node-1 (vol-0), limit 1" in second.detail
    )


async def test_with_both_limits_zero_nothing_is_upgraded(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator, volumes=1)
    _limit(emulator, "0")
    result = await make_actuator(engine_upgrade_limit=0).execute(upgrade("vol-0"))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert "automatic engine upgrade is off" in result.detail and "own per-node limit is 0" in result.detail


async def test_a_healthy_attached_volume_is_upgraded_live(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator, volumes=0)
    emulator.load("longhorn.io", "volumes", [_volume("vol-x", state="attached", robustness="healthy")])
    assert (await make_actuator().execute(upgrade("vol-x"))).outcome is Outcome.APPLIED


def _instance_manager(name: str, engine: str = "v1", **instances: str) -> dict[str, Any]:
    """An InstanceManager whose instanceEngines/instanceReplicas hold `instances` (name: state)."""
    engines = {n: {"status": {"state": s}} for n, s in instances.items() if n.startswith("e")}
    replicas = {n: {"status": {"state": s}} for n, s in instances.items() if n.startswith("r")}
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "InstanceManager",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeID": "node-1", "dataEngine": engine},
        "status": {"currentState": "running", "instanceEngines": engines, "instanceReplicas": replicas},
    }


def _im_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"longhorn.io/component": "instance-manager"}},
        "spec": {"nodeName": "node-1"},
    }


def _node(ready: bool) -> dict[str, Any]:
    """Longhorn's node-1, Ready or not (an instance manager's pod is deleted only while it is)."""
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Node",
        "metadata": {"name": "node-1", "namespace": NS},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _pod_delete(service: str, name: str, emulator: Emulator) -> Command:
    pod = emulator.get("", "pods", NS, name)
    assert pod is not None
    return guarded_pod_delete(service, msgspec.convert(pod, lh.Pod), "instance-manager", "test", time.time())


@pytest.mark.parametrize("service", ["im-restart", "setting-sync"])
@pytest.mark.parametrize("state", ["running", "starting"])
async def test_a_busy_instance_managers_pod_is_never_deleted(
    emulator: Emulator, make_actuator: MakeActuator, service: str, state: str
) -> None:
    """The pod's own preconditions (uid, resourceVersion, label) all hold: only the instance
    manager, read just before the delete, says no."""
    emulator.load("longhorn.io", "nodes", [_node(ready=True)])
    emulator.load("longhorn.io", "instancemanagers", [_instance_manager("im-1", e1="stopped", r1=state)])
    emulator.load("", "pods", [_im_pod("im-1")])
    result = await make_actuator().execute(_pod_delete(service, "im-1", emulator))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert result.detail == ("never a busy instance manager: im-1 has 1 instances running or starting (r1)")
    assert emulator.get("", "pods", NS, "im-1") is not None
    # Once idle (the replica stopped), the same decision is applied.
    emulator.load("longhorn.io", "instancemanagers", [_instance_manager("im-1", e1="stopped", r1="stopped")])
    assert (await make_actuator().execute(_pod_delete(service, "im-1", emulator))).outcome is Outcome.APPLIED
    assert emulator.get("", "pods", NS, "im-1") is None


@pytest.mark.parametrize("service", ["im-restart", "setting-sync"])
async def test_an_idle_instance_managers_pod_is_never_deleted_on_a_notready_node(
    emulator: Emulator, make_actuator: MakeActuator, service: str
) -> None:
    """The explorer's im-restart/idle and setting-sync/applying node-notready cells: a delete
    decided on a Ready node lands after it went NotReady. The node is read just before it."""
    emulator.load("longhorn.io", "nodes", [_node(ready=False)])
    emulator.load("longhorn.io", "instancemanagers", [_instance_manager("im-1", e1="stopped")])
    emulator.load("", "pods", [_im_pod("im-1")])
    result = await make_actuator().execute(_pod_delete(service, "im-1", emulator))
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert result.detail == (
        "never a node's instance manager deleted while the node is not Ready: node-1 is Ready=False"
    )
    assert emulator.get("", "pods", NS, "im-1") is not None
    emulator.load("longhorn.io", "nodes", [_node(ready=True)])
    assert (await make_actuator().execute(_pod_delete(service, "im-1", emulator))).outcome is Outcome.APPLIED


def _im_delete(emulator: Emulator, name: str, engine: str) -> Command:
    im = emulator.get("longhorn.io", "instancemanagers", NS, name)
    assert im is not None
    meta = im["metadata"]
    return new_command(
        service="setting-sync",
        verb=Verb.DELETE,
        target=Target(kind="InstanceManager", namespace=NS, name=name),
        preconditions=(
            FieldValue(path="/metadata/uid", value=meta["uid"]),
            FieldValue(path="/metadata/resourceVersion", value=meta["resourceVersion"]),
            FieldValue(path="/spec/dataEngine", value=engine),
        ),
        created_at=time.time(),
        term=1,
    )


async def test_setting_sync_deletes_an_instance_manager_only_idle_and_of_a_disabled_engine(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    emulator.load("longhorn.io", "settings", [setting("v1-data-engine", "true")])
    emulator.load("longhorn.io", "instancemanagers", [_instance_manager("im-v1", e1="running")])
    busy = await make_actuator().execute(_im_delete(emulator, "im-v1", "v1"))
    assert busy.outcome is Outcome.REJECTED_BY_POLICY and "never a busy instance manager" in busy.detail
    emulator.load("longhorn.io", "instancemanagers", [_instance_manager("im-v1", e1="stopped")])
    enabled = await make_actuator().execute(_im_delete(emulator, "im-v1", "v1"))
    assert enabled.outcome is Outcome.REJECTED_BY_POLICY
    assert (
        enabled.detail
        == "an instance manager is deleted only for a disabled data engine: v1-data-engine is true"
    )
    assert emulator.get("longhorn.io", "instancemanagers", NS, "im-v1") is not None
    emulator.load("longhorn.io", "settings", [setting("v1-data-engine", "false")])
    disabled = await make_actuator().execute(_im_delete(emulator, "im-v1", "v1"))
    assert disabled.outcome is Outcome.APPLIED, disabled.detail
    assert emulator.get("longhorn.io", "instancemanagers", NS, "im-v1") is None


def _snapshot_of(volume_name: str) -> Command:
    name = f"upgrade-{volume_name}"
    return new_command(
        service="v2-upgrade",
        verb=Verb.CREATE,
        target=Target(kind="Snapshot", namespace=NS, name=name),
        body={
            "apiVersion": "longhorn.io/v1beta2",
            "kind": "Snapshot",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"volume": volume_name, "createSnapshot": True},
        },
        created_at=time.time(),
        term=1,
    )


@pytest.mark.parametrize(
    ("volume_name", "reason"),
    [("vol-v1", "volume vol-v1 is v1"), ("no-such-volume", "volume no-such-volume does not exist")],
)
async def test_v2_upgrade_snapshots_only_v2_volumes(
    emulator: Emulator, make_actuator: MakeActuator, volume_name: str, reason: str
) -> None:
    emulator.load("longhorn.io", "volumes", [volume("vol-v1"), volume("vol-v2", data_engine="v2")])
    actuator = make_actuator()
    refused = await actuator.execute(_snapshot_of(volume_name))
    assert refused.outcome is Outcome.REJECTED_BY_POLICY
    assert refused.detail == f"snapshots only of v2 volumes: {reason}"
    assert not emulator.list("longhorn.io", "snapshots", NS)
    assert (await actuator.execute(_snapshot_of("vol-v2"))).outcome is Outcome.APPLIED


async def test_a_delete_sent_again_after_a_transient_answer_is_checked_again(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """The fault explorer's im-restart/idle/instance-starting-mid-delete: the API server answers the
    pod delete 429, and during the backoff an instance starts on the instance manager. The delete
    must not simply be sent again: the instance manager is read and judged again first."""
    emulator.load("longhorn.io", "nodes", [_node(ready=True)])
    emulator.load("longhorn.io", "instancemanagers", [_instance_manager("im-1", e1="stopped")])
    emulator.load("", "pods", [_im_pod("im-1")])
    refused: list[str] = []
    faults = emulator.faults
    judge = faults.write_fault

    def busy_during_the_backoff(rt: Any, name: str, *, creating: bool = False) -> Any:
        if rt.plural != "pods" or refused:
            return judge(rt, name, creating=creating)
        refused.append(name)
        asyncio.get_running_loop().call_soon(
            emulator.load, "longhorn.io", "instancemanagers", [_instance_manager("im-1", e1="starting")]
        )
        return too_many_requests(0)

    faults.write_fault = busy_during_the_backoff  # type: ignore[method-assign]
    result = await make_actuator().execute(_pod_delete("im-restart", "im-1", emulator))
    assert refused, "the first delete was answered 429"
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert "never a busy instance manager: im-1" in result.detail
    assert emulator.get("", "pods", NS, "im-1") is not None


ROLLED_BACK = "/metadata/annotations/engine-upgrade.corral.io~1rolled-back"


def _stuck(name: str) -> dict[str, Any]:
    """A volume whose upgrade OLD_IMAGE -> DEFAULT_IMAGE is under way (stuck, say) on node-1."""
    v = volume(name)
    v["metadata"]["uid"] = f"uid-{name}"
    v["spec"]["image"] = DEFAULT_IMAGE
    return v


def rollback(name: str, *, to: str = OLD_IMAGE, runs: str = OLD_IMAGE) -> Command:
    """engine-upgrade's rollback of `name` (corral_engine_upgrade.rollback): spec.image to `to`,
    testing that the volume runs `runs`; as its leader makes one (term 1)."""
    return new_command(
        term=1,
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace=NS, name=name),
        changes=(FieldValue(path="/spec/image", value=to), FieldValue(path=ROLLED_BACK, value=DEFAULT_IMAGE)),
        preconditions=(
            FieldValue(path="/spec/image", value=DEFAULT_IMAGE),
            FieldValue(path="/status/currentImage", value=runs),
            FieldValue(path="/metadata/uid", value=f"uid-{name}"),
            FieldValue(path="/status/ownerID", value="node-1"),
        ),
        created_at=time.time(),
    )


async def test_a_stuck_volume_is_rolled_back_to_the_image_it_runs_even_with_its_node_full(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """A rollback ends an upgrade: the per-node limit (both volumes of node-1 in flight, limit 1)
    does not hold it back, and the image it leaves is recorded on the volume."""
    seed_cluster(emulator, volumes=0)
    _limit(emulator, "1")
    emulator.load("longhorn.io", "volumes", [_stuck("stuck-1"), _stuck("stuck-2")])
    result = await make_actuator().execute(rollback("stuck-1"))
    assert result.outcome is Outcome.APPLIED, result.detail
    written = emulator.get("longhorn.io", "volumes", NS, "stuck-1")
    assert written is not None and written["spec"]["image"] == OLD_IMAGE
    assert written["metadata"]["annotations"]["engine-upgrade.corral.io/rolled-back"] == DEFAULT_IMAGE


async def test_a_forged_rollback_to_an_image_the_volume_does_not_run_is_refused(
    emulator: Emulator, make_actuator: MakeActuator, security_events: SecurityEvents
) -> None:
    """One credential, one job: a command that claims the volume runs an image it does not (its test
    would fail anyway) is refused on the volume's facts, by name, before anything is written; one
    that sets an image other than the one it tests is refused by the policy."""
    seed_cluster(emulator, volumes=0)
    emulator.load("longhorn.io", "volumes", [_stuck("stuck-1")])
    emulator.write_log.clear()
    actuator = make_actuator()
    evil = "evil/engine:1"
    lying = await actuator.execute(rollback("stuck-1", to=evil, runs=evil))
    assert lying.outcome is Outcome.REJECTED_BY_POLICY
    assert lying.detail == (
        f"rollback: a volume goes back only to the image it runs (status.currentImage {OLD_IMAGE!r}),"
        f" not to {evil!r}"
    )
    other = await actuator.execute(rollback("stuck-1", to=evil))
    assert other.outcome is Outcome.REJECTED_BY_POLICY
    assert len(security_events.events) == 2
    assert not [r for r in emulator.write_log.records(name="stuck-1") if r.verb == "patch"]
    volume_now = emulator.get("longhorn.io", "volumes", NS, "stuck-1")
    assert volume_now is not None and volume_now["spec"]["image"] == DEFAULT_IMAGE


async def test_upgrading_a_volume_once_rolled_back_removes_its_mark(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """The hold a rollback set ends with the next upgrade, in the same patch (removeOnly)."""
    seed_cluster(emulator, volumes=0)
    marked = volume("vol-0")
    marked["metadata"]["annotations"] = {"engine-upgrade.corral.io/rolled-back": "engine:bad", "keep": "me"}
    emulator.load("longhorn.io", "volumes", [marked])
    command = upgrade("vol-0")
    command = msgspec.structs.replace(
        command, changes=(*command.changes, FieldValue(path=ROLLED_BACK, value=None))
    )
    result = await make_actuator().execute(command)
    assert result.outcome is Outcome.APPLIED, result.detail
    written = emulator.get("longhorn.io", "volumes", NS, "vol-0")
    assert written is not None and written["spec"]["image"] == DEFAULT_IMAGE
    assert written["metadata"]["annotations"] == {"keep": "me"}
