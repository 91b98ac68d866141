"""SIM-IM conformance (acceptance-scenarios.md §7, SIM-IM / SIM-V2 / SIM-K8S cordon): the simulated
IM controller and kubelet do what §4 says before the im-restart scenarios trust them as an oracle.
In-process (World): the rules, round by round. The HTTP control and the webhook are checked through
the real API in tests/integration/simulator/test_conformance_im.py.

SC-IM-01 instances held in `starting` and released; SC-IM-02 the CPU request from allocatable CPU and
the per-node override; SC-IM-03 v2 pods encode hugepages and the data-engine settings, and corral's
own §4.5 predicates find a fresh v2 pod synced; SC-IM-04 hugepage and CPU room on the node;
SC-IM-05 the disable-v2 label and the node selector; SC-IM-06 cordoned nodes; SC-IM-07 pod uids
and restart counts; SC-IM-08 failed pods, deleted by the simulated IM controller only when told
to, and the backoff on repeated recreations.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec

from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.synced import PodContext, cpu_mask_applied, hugepage_check, unsynced_settings
from corral_model import longhorn as lh
from corral_sandbox.seeds import seed_from_dict
from corral_sandbox.simulator import SimConfig, objects
from corral_sandbox.simulator.im_ledger import instance_manager_pods
from corral_sandbox.simulator.im_nodes import DISABLE_V2_LABEL
from tests.unit.simulator.world import World

NS = "longhorn-system"
IMAGE = "longhornio/longhorn-engine:v1.10.0"


def world(
    nodes: list[dict[str, Any] | str] | int = 3,
    *,
    config: SimConfig | None = None,
    settings: dict[str, str] | None = None,
) -> World:
    seed = seed_from_dict({"nodes": nodes, "settings": settings or {}, "generate": {"volumes": 0}})
    built = World(seed=seed, config=config or SimConfig(seed=seed.seed, images=seed.image_profiles))
    built.settle()
    return built


def managers(w: World, node: str, engine: str = "v1") -> list[dict[str, Any]]:
    return [
        im
        for im in w.view.all("instancemanager")
        if im["spec"]["nodeID"] == node and im["spec"]["dataEngine"] == engine
    ]


def pod_of(w: World, node: str, engine: str = "v1") -> dict[str, Any] | None:
    [im] = managers(w, node, engine)
    return w.view.get("pod", im["metadata"]["name"])


def attach(w: World, name: str, node: str, replicas: int = 1) -> None:
    w.put("volume", objects.volume(name, NS, image=IMAGE, replicas=replicas, node_id=node))


# --- SC-IM-01 --------------------------------------------------------------------------------------


def test_sc_im_01_an_instance_is_held_starting_until_released() -> None:
    w = world()
    engine = objects.engine_name("vol-1")
    w.memory.held_instances.add(engine)
    attach(w, "vol-1", "node-1")
    w.settle()
    [im] = managers(w, "node-1")
    assert w.get("engine", engine)["status"]["currentState"] == "starting"
    assert im["status"]["instanceEngines"][engine]["status"]["state"] == "starting"
    assert w.get("volume", "vol-1")["status"]["state"] != "attached"

    w.memory.held_instances.discard(engine)
    w.settle()
    [im] = managers(w, "node-1")
    assert w.get("engine", engine)["status"]["currentState"] == "running"
    assert im["status"]["instanceEngines"][engine]["status"]["state"] == "running"
    assert w.get("volume", "vol-1")["status"]["state"] == "attached"


# --- SC-IM-02 --------------------------------------------------------------------------------------


def test_sc_im_02_cpu_request_from_allocatable_and_the_node_override() -> None:
    w = world([{"name": "node-1", "cpu": "2"}, {"name": "node-2", "cpu": "8", "imCPURequest": 500}])
    one, two = pod_of(w, "node-1"), pod_of(w, "node-2")
    assert one is not None and two is not None
    assert one["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "240m"  # 12 % of 2 CPUs
    assert two["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"  # the override


# --- SC-IM-03 --------------------------------------------------------------------------------------


def _judge_with_corral(w: World, node: str) -> tuple[tuple[str, ...], bool, bool]:
    """corral_dangerzone's §4.5 predicates, §4.3 step 3 and step 4 on the simulator's objects."""
    [raw_im] = managers(w, node, "v2")
    im = msgspec.convert(raw_im, lh.InstanceManager)
    pod = msgspec.convert(w.get("pod", raw_im["metadata"]["name"]), lh.Pod)
    lh_node = msgspec.convert(w.get("node", node), lh.Node)
    kube = msgspec.convert(w.get("kubenode", node), lh.KubeNode)
    values = {s["metadata"]["name"]: s["value"] for s in w.view.all("setting")}
    settings = DangerZoneSettings.from_values(values)
    unsynced = unsynced_settings(settings, PodContext(im=im, pod=pod, node=lh_node, kube_node=kube))
    hugepages = hugepage_check(settings, im, pod, kube)
    return tuple(str(s) for s in unsynced), cpu_mask_applied(settings, im), hugepages.synced


def test_sc_im_03_a_v2_pod_encodes_the_data_engine_settings_at_creation() -> None:
    w = world([{"name": "node-1", "hugepages": "4Gi"}], settings={"v2-data-engine": "true"})
    pod = pod_of(w, "node-1", "v2")
    assert pod is not None and pod["status"]["phase"] == "Running"
    container = pod["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "start-spdk-tgt"
    assert args[args.index("--spdk-memory-size") + 1] == "2048"
    assert args[args.index("--spdk-cpumask") + 1] == "0x3"
    assert {"--enable-irq-affinity", "--enable-workqueue-affinity", "--enable-rps"} <= set(args)
    assert container["resources"]["limits"]["hugepages-2Mi"] == "2048Mi"
    [im] = managers(w, "node-1", "v2")
    assert im["status"]["dataEngineStatus"]["v2"] == {
        "cpuMask": "0x3",
        "cpuCoreNumber": 0,
        "interruptModeEnabled": "false",
    }
    # The two readings of §4.4/§4.5 (the simulator's, corral's) agree: a fresh pod lags nothing.
    assert _judge_with_corral(w, "node-1") == ((), True, True)

    # Settings changed afterwards: the running pod keeps what it was built with, and lags them.
    for name, value in {
        "data-engine-memory-size": '{"v2":"1024"}',
        "data-engine-cpu-mask": '{"v2":"0xf"}',
        "data-engine-iobuf-large-pool-size": '{"v2":"2048"}',
    }.items():
        w.patch("setting", name, {"value": value})
    w.settle()
    unsynced, mask_applied, hugepages_synced = _judge_with_corral(w, "node-1")
    assert unsynced == ("data-engine-iobuf-large-pool-size",)
    assert not mask_applied and not hugepages_synced

    w.delete("pod", im["metadata"]["name"])
    w.settle()
    assert _judge_with_corral(w, "node-1") == ((), True, True), "the new pod is built from the new settings"
    args = w.get("pod", im["metadata"]["name"])["spec"]["containers"][0]["args"]
    assert args[args.index("--spdk-iobuf-large-pool-size") + 1] == "2048"


# --- SC-IM-04 --------------------------------------------------------------------------------------


def test_sc_im_04_a_pod_without_room_on_its_node_stays_pending_until_room_is_made() -> None:
    w = world(
        [{"name": "node-1", "hugepages": "1Gi"}, {"name": "node-2", "cpu": "1"}],
        settings={"v2-data-engine": "true", "guaranteed-instance-manager-cpu": '{"v1":"60","v2":"10"}'},
    )
    v2_pod = pod_of(w, "node-1", "v2")
    assert v2_pod is not None and v2_pod["status"]["phase"] == "Pending"
    assert (
        v2_pod["status"]["conditions"][0]["message"]
        == "0/1 nodes are available: 1 Insufficient hugepages-2Mi."
    )
    [v2_im] = managers(w, "node-1", "v2")
    assert v2_im["status"]["currentState"] == "starting"

    # node-2: 1 CPU; its v1 IM (600m) runs, so the v2 one (100m) fits, but a second v1 IM of a new
    # image would need 600m more: it waits for the old one to go.
    assert pod_of(w, "node-2", "v2")["status"]["phase"] == "Running"  # type: ignore[index]
    w.patch("kubenode", "node-1", {"status": {"allocatable": {"hugepages-2Mi": "4Gi"}}})
    w.settle()
    assert pod_of(w, "node-1", "v2")["status"]["phase"] == "Running"  # type: ignore[index]

    attach(w, "vol-1", "node-2")
    w.settle()
    w.patch("setting", "default-instance-manager-image", {"value": "longhornio/longhorn-instance-manager:v2"})
    w.settle()
    on_two = managers(w, "node-2")
    new = next(im for im in on_two if im["spec"]["image"].endswith(":v2"))
    new_pod = w.get("pod", new["metadata"]["name"])
    assert new_pod["status"]["phase"] == "Pending"
    assert "Insufficient cpu" in new_pod["status"]["conditions"][0]["message"]
    assert len(on_two) == 2, "the busy old IM stays"

    w.patch("volume", "vol-1", {"spec": {"nodeID": ""}})  # detach: the old IM goes idle and is removed
    w.settle()
    [only] = managers(w, "node-2")
    assert only["metadata"]["name"] == new["metadata"]["name"]
    assert w.get("pod", new["metadata"]["name"])["status"]["phase"] == "Running"


# --- SC-IM-05 --------------------------------------------------------------------------------------


def test_sc_im_05_the_disable_v2_label_removes_an_idle_v2_im_and_keeps_the_v1_one() -> None:
    w = world(settings={"v2-data-engine": "true"})
    assert len(managers(w, "node-2", "v2")) == 1
    w.patch("kubenode", "node-2", {"metadata": {"labels": {DISABLE_V2_LABEL: "true"}}})
    w.settle()
    assert managers(w, "node-2", "v2") == []
    assert len(managers(w, "node-2", "v1")) == 1 and len(managers(w, "node-1", "v2")) == 1
    w.patch("kubenode", "node-2", {"metadata": {"labels": {DISABLE_V2_LABEL: None}}})
    w.settle()
    [back] = managers(w, "node-2", "v2")
    assert back["status"]["currentState"] == "running"


def test_sc_im_05b_a_node_the_node_selector_excludes_keeps_only_a_busy_im() -> None:
    w = world([{"name": "node-1", "labels": {"disk": "ssd"}}, "node-2", "node-3"])
    attach(w, "vol-1", "node-2")
    w.settle()
    w.patch("setting", "system-managed-components-node-selector", {"value": "disk:ssd"})
    w.settle()
    assert len(managers(w, "node-1")) == 1
    assert managers(w, "node-3") == [], "idle there: removed"
    assert len(managers(w, "node-2")) == 1, "busy there: kept"
    w.patch("volume", "vol-1", {"spec": {"nodeID": ""}})
    w.settle()
    assert managers(w, "node-2") == [], "removed once idle, and none created again"


# --- SC-IM-06 --------------------------------------------------------------------------------------


def test_sc_im_06_no_pod_on_a_cordoned_node_and_the_condition_says_so() -> None:
    w = world([{"name": "node-1", "cordoned": True}, "node-2"])
    [im] = managers(w, "node-1")
    name = im["metadata"]["name"]
    assert w.view.get("pod", name) is None
    assert im["status"]["currentState"] == "stopped"
    node_ready = next(c for c in im["status"]["conditions"] if c["type"] == "NodeReady")
    assert (node_ready["status"], node_ready["reason"]) == ("False", "Unschedulable")
    assert node_ready["message"] == "Instance manager node node-1 is unschedulable"
    assert pod_of(w, "node-2") is not None

    w.patch("kubenode", "node-1", {"spec": {"unschedulable": None}})
    w.settle()
    [im] = managers(w, "node-1")
    assert im["status"]["currentState"] == "running"
    node_ready = next(c for c in im["status"]["conditions"] if c["type"] == "NodeReady")
    assert node_ready["status"] == "True"


# --- SC-IM-07 --------------------------------------------------------------------------------------


def test_sc_im_07_pod_uids_and_restart_counts_are_kept_per_instance_manager() -> None:
    w = world()
    [im] = managers(w, "node-1")
    name = im["metadata"]["name"]
    first = w.get("pod", name)["metadata"]["uid"]
    w.delete("pod", name)
    w.settle()
    second = w.get("pod", name)["metadata"]["uid"]
    w.memory.pod_restarts[second] = 2
    w.settle()
    [entry] = [e for e in instance_manager_pods(w.view, w.memory) if e["name"] == name]
    assert entry["podUIDs"] == [first, second] and entry["recreations"] == 1
    assert entry["pod"] == {"uid": second, "phase": "Running", "restartCount": 2, "terminating": False}
    assert entry["node"] == "node-1" and entry["state"] == "running"


# --- SC-IM-08 --------------------------------------------------------------------------------------


def test_sc_im_08_a_failed_pod_is_left_to_whoever_plays_handle_pod() -> None:
    w = world(config=replace(SimConfig(), im_delete_failed_pods=False))
    [im] = managers(w, "node-1")
    name = im["metadata"]["name"]
    uid = w.get("pod", name)["metadata"]["uid"]
    w.memory.fail_im_pods[name] = uid
    w.settle()
    assert w.get("pod", name)["status"]["phase"] == "Failed"
    assert w.get("instancemanager", name)["status"]["currentState"] == "error"
    assert w.get("pod", name)["metadata"]["uid"] == uid, "kept: corral's im-restart deletes it"

    w.delete("pod", name)  # what im-restart's delete does
    w.settle()
    assert w.get("pod", name)["metadata"]["uid"] != uid
    assert w.get("instancemanager", name)["status"]["currentState"] == "running"

    longhorn = world()
    [im] = managers(longhorn, "node-1")
    failing = longhorn.get("pod", im["metadata"]["name"])["metadata"]
    longhorn.memory.fail_im_pods[failing["name"]] = failing["uid"]
    longhorn.settle()
    entry = next(
        e
        for e in instance_manager_pods(longhorn.view, longhorn.memory)
        if e["name"] == im["metadata"]["name"]
    )
    assert entry["recreations"] == 1 and entry["pod"]["phase"] == "Running"


def test_sc_im_08a_the_fault_fails_one_pod_not_its_replacement() -> None:
    """IM-04: the pod is deleted (by corral) before the simulated kubelet looks at it again, so it
    never sees its Failed phase: the pod made after it must still run, or corral restarts twice."""
    w = world(config=replace(SimConfig(), im_delete_failed_pods=False))
    [im] = managers(w, "node-1")
    name = im["metadata"]["name"]
    uid = w.get("pod", name)["metadata"]["uid"]
    w.memory.fail_im_pods[name] = uid
    while w.get("pod", name)["status"]["phase"] != "Failed":
        w.round()
    w.delete("pod", name)
    w.settle()
    assert w.get("pod", name)["metadata"]["uid"] != uid
    assert w.get("pod", name)["status"]["phase"] == "Running"
    assert name not in w.memory.fail_im_pods, "the fault is done with its pod"


def test_sc_im_08b_repeated_recreations_back_off() -> None:
    """IM-05: the IM controller's per-IM backoff on recreating a pod (§4.3 step 10)."""
    w = world(config=replace(SimConfig(), im_recreate_backoff_seconds=5.0))
    [im] = managers(w, "node-1")
    name = im["metadata"]["name"]
    w.now += 10  # well past the backoff of the first creation
    w.delete("pod", name)
    w.round()
    assert w.view.get("pod", name) is not None, "the first recreation is immediate"
    recreated_at = w.now
    w.delete("pod", name)
    for _ in range(5):
        w.round()
    assert w.view.get("pod", name) is None, "a second one within the backoff waits"
    w.settle()
    assert w.view.get("pod", name) is not None and w.now >= recreated_at + 5.0
