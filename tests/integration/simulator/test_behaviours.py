"""Simulator behaviours beyond SC-01..09 (acceptance-scenarios.md §7): SIM-VOL, SIM-REB, SIM-IM,
SIM-CRASH, SIM-EI partial deployment and SIM-FAULT, each observed through kubernetes-asyncio."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral_sandbox.simulator import ImageProfile, SimConfig
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config

PARTIAL_IMAGE = "longhornio/longhorn-engine:partial"


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(images={PARTIAL_IMAGE: ImageProfile(undeployed_nodes=frozenset({"node-3"}))})


def state(volume: dict[str, Any]) -> tuple[str, str]:
    st = volume.get("status", {})
    return st.get("state", ""), st.get("robustness", "")


async def attach(sandbox: Sandbox, name: str, node: str = "node-1", replicas: int = 3) -> None:
    await sandbox.create_volume(name, replicas=replicas)
    await sandbox.wait_volume(name, lambda v: state(v)[0] == "detached")
    await sandbox.patch("volumes", name, {"spec": {"nodeID": node}})
    await sandbox.wait_volume(name, lambda v: state(v) == ("attached", "healthy"))


# --- SIM-VOL ---------------------------------------------------------------------------------------


async def test_more_replicas_than_nodes_is_degraded_until_lowered(sandbox: Sandbox) -> None:
    await attach(sandbox, "vol-d", replicas=3)
    await sandbox.patch("volumes", "vol-d", {"spec": {"numberOfReplicas": 4}})
    await sandbox.wait_volume("vol-d", lambda v: state(v) == ("attached", "degraded"))
    unscheduled = [r for r in await sandbox.replicas_of("vol-d") if not r["spec"]["nodeID"]]
    assert len(unscheduled) == 1, "the fourth replica cannot be placed on a 3-node cluster"
    await sandbox.patch("volumes", "vol-d", {"spec": {"numberOfReplicas": 3}})
    await sandbox.wait_volume("vol-d", lambda v: state(v) == ("attached", "healthy"))

    async def three() -> bool:
        return len(await sandbox.replicas_of("vol-d")) == 3

    await sandbox.wait_for(three, what="the unscheduled replica dropped")


async def test_expansion_stays_pending_then_completes(sandbox: Sandbox) -> None:
    await sandbox.create_volume("vol-x", replicas=2)
    await sandbox.wait_volume("vol-x", lambda v: state(v)[0] == "detached")
    async with sandbox.recording("volumes", "vol-x") as seen:
        await sandbox.patch("volumes", "vol-x", {"spec": {"size": str(2 * 2**30)}})

        def expanded(v: dict[str, Any]) -> bool:
            # a Volume has no currentSize (its Engine has): done is a version after a pending one
            # that no longer requires expansion
            pending = [i for i, s in enumerate(seen) if s.get("status", {}).get("expansionRequired")]
            later = seen[pending[0] + 1 :] if pending else []
            return any(s is v for s in later) and v.get("status", {}).get("expansionRequired") is False

        await sandbox.wait_recorded(seen, expanded)
    assert any(v.get("status", {}).get("expansionRequired") for v in seen), (
        "expansion was pending for a while"
    )
    assert not seen[-1]["status"]["expansionRequired"]

    async def engine_expanded() -> bool:
        engine = await sandbox.engine_of("vol-x")
        size = str(2 * 2**30)
        return bool(engine["spec"]["volumeSize"] == engine.get("status", {}).get("currentSize") == size)

    await sandbox.wait_for(engine_expanded, what="engine spec and status at the new size")


async def test_owner_is_settable_while_detached_and_follows_attachment(sandbox: Sandbox) -> None:
    await sandbox.create_volume("vol-o", replicas=1)
    volume = await sandbox.wait_volume("vol-o", lambda v: bool(v.get("status", {}).get("ownerID")))
    other = next(n for n in ("node-1", "node-2", "node-3") if n != volume["status"]["ownerID"])
    await sandbox.patch_status("volumes", "vol-o", {"status": {"ownerID": other}})

    async def kept() -> bool:
        return bool((await sandbox.get("volumes", "vol-o"))["status"]["ownerID"] == other)

    await sandbox.stays(kept, 0.2, what="a chosen owner is kept while detached")
    attach_to = next(n for n in ("node-1", "node-2", "node-3") if n != other)
    await sandbox.patch("volumes", "vol-o", {"spec": {"nodeID": attach_to}})
    await sandbox.wait_volume(
        "vol-o", lambda v: v.get("status", {}).get("ownerID") == attach_to and state(v)[0] == "attached"
    )


async def test_deleting_a_volume_cleans_up_engine_and_replicas(sandbox: Sandbox) -> None:
    await attach(sandbox, "vol-del", replicas=2)
    await sandbox.delete("volumes", "vol-del")

    async def gone() -> bool:
        leftovers = await sandbox.replicas_of("vol-del")
        return not leftovers and await sandbox.find("volumes", "vol-del") is None

    await sandbox.wait_for(gone, what="volume, engine and replicas deleted")
    assert await sandbox.find("engines", "vol-del-e-0") is None


async def test_standby_volume_restores_then_stays_standby(sandbox: Sandbox) -> None:
    from corral_sandbox.simulator import objects

    body = objects.volume("vol-dr", sandbox.namespace, image=DEFAULT_IMAGE, replicas=2, standby=True)
    await sandbox.create("volumes", body)
    async with sandbox.recording("volumes", "vol-dr") as seen:
        volume = await sandbox.wait_recorded(
            seen,
            lambda v: (
                v.get("status", {}).get("restoreRequired") is False
                and v.get("status", {}).get("isStandby") is True
            ),
        )
    assert any(v.get("status", {}).get("restoreRequired") for v in seen)
    assert volume["spec"]["frontend"] == ""


async def test_migration_node_is_reported_while_attached(sandbox: Sandbox) -> None:
    await attach(sandbox, "vol-m", replicas=2)
    await sandbox.patch("volumes", "vol-m", {"spec": {"migrationNodeID": "node-2"}})
    await sandbox.wait_volume(
        "vol-m", lambda v: v.get("status", {}).get("currentMigrationNodeID") == "node-2"
    )
    await sandbox.patch("volumes", "vol-m", {"spec": {"migrationNodeID": ""}})
    await sandbox.wait_volume("vol-m", lambda v: v.get("status", {}).get("currentMigrationNodeID") == "")


# --- SIM-REB -------------------------------------------------------------------------------------


# Each rebuild lasts longer than one pass of the invariant below (six API reads) can take on a
# loaded machine: with 0.5 s rebuilds a full run once saw none of the three in flight (peak 0).
@pytest.mark.parametrize("sandbox_config", [fast_config(rebuild_seconds=1.5)])
async def test_rebuilds_respect_the_per_node_limit(sandbox: Sandbox) -> None:
    await sandbox.set_setting("concurrent-replica-rebuild-per-node-limit", "1")
    names = ["vol-a", "vol-b", "vol-c"]
    for name in names:
        await attach(sandbox, name)
    for name in names:
        victim = next(r for r in await sandbox.replicas_of(name) if r["spec"]["nodeID"] == "node-2")
        await sandbox.delete("replicas", victim["metadata"]["name"])
    peak = 0

    async def at_most_one_rebuild_on_node2() -> None:
        nonlocal peak
        rebuilding = 0
        for name in names:
            modes = (await sandbox.engine_of(name)).get("status", {}).get("replicaModeMap") or {}
            on_node2 = {
                r["metadata"]["name"]
                for r in await sandbox.replicas_of(name)
                if r["spec"]["nodeID"] == "node-2"
            }
            rebuilding += sum(1 for replica, mode in modes.items() if mode == "WO" and replica in on_node2)
        peak = max(peak, rebuilding)
        assert rebuilding <= 1, f"{rebuilding} rebuilds at once on node-2 with a limit of 1"

    degraded: set[str] = set()

    async def all_rebuilt() -> bool:
        """Every volume seen degraded, then all healthy again: right after the deletes a volume
        may still say healthy, before the simulator has noticed its lost replica."""
        states = {n: state(await sandbox.get("volumes", n)) for n in names}
        degraded.update(n for n, s in states.items() if s[1] == "degraded")
        return degraded == set(names) and all(s == ("attached", "healthy") for s in states.values())

    await sandbox.wait_for(all_rebuilt, within=20, what="all rebuilt", invariant=at_most_one_rebuild_on_node2)
    assert peak == 1


async def test_a_failed_replica_is_replaced_and_cleaned_up(sandbox: Sandbox) -> None:
    await attach(sandbox, "vol-f")
    victim = (await sandbox.replicas_of("vol-f"))[0]["metadata"]["name"]
    sandbox.simulator.faults.fail_replica(victim)

    async def failed() -> bool:
        replica = await sandbox.find("replicas", victim)
        return replica is None or bool(replica["spec"].get("failedAt"))

    await sandbox.wait_for(failed, what="replica marked failed")
    await sandbox.wait_volume("vol-f", lambda v: state(v) == ("attached", "healthy"), what="rebuilt")

    async def cleaned() -> bool:
        replicas = await sandbox.replicas_of("vol-f")
        return len(replicas) == 3 and victim not in {r["metadata"]["name"] for r in replicas}

    await sandbox.wait_for(cleaned, what="failed replica deleted after staleReplicaTimeout")


# --- SIM-IM and SIM-CRASH -------------------------------------------------------------------------


async def _im_pod(sandbox: Sandbox, node: str) -> Any:
    pods = await sandbox.core.list_namespaced_pod(
        sandbox.namespace, label_selector=f"longhorn.io/component=instance-manager,longhorn.io/node={node}"
    )
    return pods.items[0] if pods.items else None


async def test_instance_manager_pods_follow_the_settings_current_at_creation(sandbox: Sandbox) -> None:
    # Longhorn's webhook refuses a priority class that does not exist: the one set below is created
    await sandbox.create_priority_class("longhorn-critical")
    managers = await sandbox.list("instancemanagers")
    assert sorted(im["spec"]["nodeID"] for im in managers) == ["node-1", "node-2", "node-3"]
    assert all(im["status"]["currentState"] == "running" for im in managers)
    pod = await _im_pod(sandbox, "node-1")
    assert pod.status.phase == "Running"
    assert pod.spec.node_name == "node-1"
    assert pod.spec.containers[0].resources.requests["cpu"] == "480m"  # 12% of 4 CPUs
    assert pod.spec.containers[0].liveness_probe.timeout_seconds == 10
    assert json.loads(pod.metadata.annotations["longhorn.io/last-applied-tolerations"]) == []

    for node in ("node-1", "node-2", "node-3"):  # the node selector below must keep every node's IM
        await sandbox.core.patch_node(node, {"metadata": {"labels": {"disk": "ssd"}}})
    for name, value in {
        "taint-toleration": "key1=value1:NoSchedule",
        "priority-class": "longhorn-critical",
        "guaranteed-instance-manager-cpu": '{"v1":"25","v2":"12"}',
        "storage-network": "kube-system/storage",
        "instance-manager-pod-liveness-probe-timeout": "20",
        "system-managed-components-node-selector": "disk:ssd",
    }.items():
        await sandbox.set_setting(name, value)
    untouched = await _im_pod(sandbox, "node-1")
    assert untouched.metadata.uid == pod.metadata.uid and untouched.spec.priority_class_name is None

    async with sandbox.recording("instancemanagers") as seen:
        await sandbox.core.delete_namespaced_pod(pod.metadata.name, sandbox.namespace)

        async def recreated() -> Any:
            new = await _im_pod(sandbox, "node-1")
            return (
                new
                if new is not None and new.metadata.uid != pod.metadata.uid and new.status.phase == "Running"
                else None
            )

        new = await sandbox.wait_for(recreated, what="IM pod recreated and running")
        im_name = pod.metadata.name

        async def running_again() -> bool:
            mine = [v for v in seen if v["metadata"]["name"] == im_name]
            states = [v.get("status", {}).get("currentState") for v in mine]
            down = next((i for i, st in enumerate(states) if st != "running"), None)
            return down is not None and "running" in states[down:]

        await sandbox.wait_for(running_again, what="instance manager down, then running again")
    states = [im["status"].get("currentState") for im in seen if im["metadata"]["name"] == pod.metadata.name]
    assert "running" in states and ({"stopped", "error", "starting"} & set(states))
    assert new.spec.tolerations[0].key == "key1" and new.spec.tolerations[0].effect == "NoSchedule"
    assert (
        json.loads(new.metadata.annotations["longhorn.io/last-applied-tolerations"])[0]["value"] == "value1"
    )
    assert new.spec.priority_class_name == "longhorn-critical"
    assert new.spec.node_selector == {"disk": "ssd"}
    assert new.spec.containers[0].resources.requests["cpu"] == "1"  # 25% of 4 CPUs
    assert new.spec.containers[0].liveness_probe.timeout_seconds == 20
    assert new.spec.containers[0].liveness_probe.period_seconds == 21
    assert json.loads(new.metadata.annotations["k8s.v1.cni.cncf.io/networks"]) == [
        {"namespace": "kube-system", "name": "storage", "interface": "lhnet1"}
    ]
    other = await _im_pod(sandbox, "node-2")
    assert other.spec.priority_class_name is None, "only the recreated pod picks the new settings up"

    sandbox.simulator.faults.restart_instance_manager_container(new.metadata.name)

    async def restarted() -> bool:
        current = await _im_pod(sandbox, "node-1")
        return bool(current.status.container_statuses[0].restart_count == 1)

    await sandbox.wait_for(restarted, what="restartCount bumped")


async def test_instance_maps_list_the_running_instances(sandbox: Sandbox) -> None:
    await attach(sandbox, "vol-im", node="node-1", replicas=3)
    pod = await _im_pod(sandbox, "node-1")

    async def listed() -> bool:
        im = await sandbox.get("instancemanagers", pod.metadata.name)
        engines = im["status"].get("instanceEngines") or {}
        replicas = im["status"].get("instanceReplicas") or {}
        return (
            engines.get("vol-im-e-0", {}).get("status", {}).get("state") == "running" and len(replicas) == 1
        )

    await sandbox.wait_for(listed, what="engine and local replica in the IM's instance maps")


async def test_deleting_a_busy_instance_manager_pod_crashes_and_reattaches(sandbox: Sandbox) -> None:
    """SIM-CRASH through the IM: the engine dies with its IM pod; the volume detaches and comes back."""
    await attach(sandbox, "vol-busy", node="node-1")
    pod = await _im_pod(sandbox, "node-1")
    async with sandbox.recording("volumes", "vol-busy") as seen:
        await sandbox.core.delete_namespaced_pod(pod.metadata.name, sandbox.namespace)
        await sandbox.wait_recorded(
            seen,
            lambda v: (
                state(v) == ("attached", "healthy") and bool(v.get("status", {}).get("remountRequestedAt"))
            ),
            what="reattached after the crash",
        )
    assert "detached" in [v.get("status", {}).get("state") for v in seen]


# --- SIM-EI partial deployment ----------------------------------------------------------------------


async def test_an_image_missing_on_a_node_blocks_live_upgrade_of_volumes_there(sandbox: Sandbox) -> None:
    await sandbox.create_engine_image(PARTIAL_IMAGE)

    async def partial() -> dict[str, Any] | None:
        ei = await sandbox.engine_image(PARTIAL_IMAGE)
        deployment = ei.get("status", {}).get("nodeDeploymentMap") or {}
        return ei if deployment == {"node-1": True, "node-2": True, "node-3": False} else None

    ei = await sandbox.wait_for(partial, what="deployed on node-1 and node-2 only")
    assert ei["status"]["state"] == "deploying"
    await attach(sandbox, "vol-p", replicas=3)  # one replica per node, so one on node-3
    await sandbox.patch("volumes", "vol-p", {"spec": {"image": PARTIAL_IMAGE}})

    async def pending() -> bool:
        volume = await sandbox.get("volumes", "vol-p")
        return volume["status"]["currentImage"] == DEFAULT_IMAGE and state(volume) == ("attached", "healthy")

    await sandbox.stays(pending, 3 * sandbox.simulator.config.live_upgrade_seconds, what="live upgrade waits")


# --- SIM-FAULT -----------------------------------------------------------------------------------------


async def test_a_stalled_controller_resumes_and_a_restarted_one_carries_on(sandbox: Sandbox) -> None:
    await sandbox.create_volume("vol-s", replicas=2)
    await sandbox.wait_volume("vol-s", lambda v: state(v)[0] == "detached")
    sandbox.simulator.faults.stall("volume")
    await sandbox.patch("volumes", "vol-s", {"spec": {"nodeID": "node-1"}})

    async def still_detached() -> bool:
        return state(await sandbox.get("volumes", "vol-s"))[0] == "detached"

    await sandbox.stays(still_detached, 0.2, what="a stalled volume controller does nothing")
    sandbox.simulator.faults.resume("volume")
    await sandbox.wait_volume("vol-s", lambda v: state(v) == ("attached", "healthy"))
    await sandbox.simulator.faults.restart()
    await sandbox.patch("volumes", "vol-s", {"spec": {"nodeID": ""}})
    await sandbox.wait_volume("vol-s", lambda v: state(v)[0] == "detached")


async def test_a_node_going_not_ready_fails_its_replicas_until_it_returns(sandbox: Sandbox) -> None:
    await attach(sandbox, "vol-n", node="node-1")
    lost = next(
        r["metadata"]["name"] for r in await sandbox.replicas_of("vol-n") if r["spec"]["nodeID"] == "node-3"
    )
    await sandbox.simulator.faults.set_node_ready("node-3", False)
    await sandbox.wait_volume("vol-n", lambda v: state(v) == ("attached", "degraded"), what="degraded")
    managers = [im for im in await sandbox.list("instancemanagers") if im["spec"]["nodeID"] == "node-3"]
    assert managers[0]["status"]["currentState"] == "unknown"
    await sandbox.simulator.faults.set_node_ready("node-3", True)
    await sandbox.wait_volume(
        "vol-n", lambda v: state(v) == ("attached", "healthy"), what="rebuilt on node-3"
    )
    names = {
        r["metadata"]["name"] for r in await sandbox.replicas_of("vol-n") if r["spec"]["nodeID"] == "node-3"
    }
    assert names and lost not in names


async def test_v2_volumes_use_v2_instance_managers_and_follow_no_engine_image(sandbox: Sandbox) -> None:
    from corral_sandbox.simulator import objects

    # Longhorn's webhook enables v2 only where every node has the hugepages it asks for (2 GiB)
    for node in ("node-1", "node-2", "node-3"):
        await sandbox.set_hugepages(node, "2Gi")
    await sandbox.set_setting("v2-data-engine", "true")
    im_image = (await sandbox.get("settings", "default-instance-manager-image"))["value"]

    async def v2_managers() -> bool:
        managers = await sandbox.list("instancemanagers")
        v2 = [im for im in managers if im["spec"]["dataEngine"] == "v2"]
        return len(v2) == 3 and all(im.get("status", {}).get("currentState") == "running" for im in v2)

    await sandbox.wait_for(v2_managers, what="a running v2 instance manager per node")
    body = objects.volume(
        "vol-v2", sandbox.namespace, image=im_image, replicas=2, data_engine="v2", node_id="node-2"
    )
    await sandbox.create("volumes", body)
    await sandbox.wait_volume("vol-v2", lambda v: state(v) == ("attached", "healthy"))
    assert all(r["spec"]["image"] == "" for r in await sandbox.replicas_of("vol-v2"))
    ei = await sandbox.engine_image(DEFAULT_IMAGE)
    assert ei["status"]["refCount"] == 0, "a v2 volume holds no engine image"


async def test_a_new_instance_manager_image_replaces_idle_old_managers(sandbox: Sandbox) -> None:
    old = {im["metadata"]["name"] for im in await sandbox.list("instancemanagers")}
    # read-only: set as an upgraded longhorn-manager sets it (set_setting plays the manager)
    await sandbox.set_setting(
        "default-instance-manager-image", "longhornio/longhorn-instance-manager:v1.11.0"
    )

    async def replaced() -> bool:
        managers = await sandbox.list("instancemanagers")
        names = {im["metadata"]["name"] for im in managers}
        running = all(im.get("status", {}).get("currentState") == "running" for im in managers)
        return len(names) == 3 and not (names & old) and running

    await sandbox.wait_for(replaced, what="one new-image instance manager per node, old ones gone")


async def test_a_malformed_volume_is_skipped_and_reported_not_fatal(sandbox: Sandbox) -> None:
    """Bad input loses nothing: one volume with nonsense in it does not stop the others."""
    await sandbox.create_volume("vol-bad", replicas=1)
    await sandbox.wait_volume("vol-bad", lambda v: state(v)[0] == "detached")
    await sandbox.patch("volumes", "vol-bad", {"spec": {"numberOfReplicas": "lots"}})
    await attach(sandbox, "vol-good", replicas=2)

    async def reported() -> bool:
        return any("vol-bad" in error for error in sandbox.simulator.object_errors)

    await sandbox.wait_for(reported, what="the malformed volume reported")
    await sandbox.patch("volumes", "vol-bad", {"spec": {"numberOfReplicas": 1, "nodeID": "node-2"}})
    await sandbox.wait_volume("vol-bad", lambda v: state(v) == ("attached", "healthy"), what="repaired")
    sandbox.simulator.object_errors.clear()


async def test_the_simulator_rides_out_api_faults(sandbox: Sandbox) -> None:
    """Injected 409/429/500 answers on its writes and watches cut every few events slow the simulated
    controllers down but never wedge them (SIM-FAULT against the emulator's API faults)."""
    from tests.fixtures.sandbox import UPGRADE_IMAGE

    await sandbox.create_engine_image(UPGRADE_IMAGE)
    await attach(sandbox, "vol-api", replicas=3)
    sandbox.emulator.faults.update(
        {
            "conflict_rate": 0.2,
            "throttle_rate": 0.1,
            "error_rate": 0.1,
            "watch_cut_after_events": 5,
            "plurals": ["engines", "replicas", "engineimages", "instancemanagers", "pods"],
            "seed": 11,
        }
    )
    try:
        await sandbox.patch("volumes", "vol-api", {"spec": {"image": UPGRADE_IMAGE}})
        await sandbox.wait_volume(
            "vol-api",
            lambda v: v.get("status", {}).get("currentImage") == UPGRADE_IMAGE and state(v)[1] == "healthy",
            within=30,
            what="live upgrade through API faults",
        )
        await sandbox.patch("volumes", "vol-api", {"spec": {"nodeID": ""}})
        await sandbox.wait_volume("vol-api", lambda v: state(v)[0] == "detached", within=30)
    finally:
        sandbox.emulator.faults.reset()
    assert sandbox.simulator.write_errors > 0, "faults were injected"
