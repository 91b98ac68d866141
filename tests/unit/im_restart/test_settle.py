"""Settings written in quick succession cost an idle instance manager one restart, not one each:
its settings restart waits a short settle since the latest change. An IM that turns idle after the
change (its volume detached) is restarted at once (issue 24)."""

from __future__ import annotations

import msgspec

from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.core import DeciderConfig
from corral_im_restart.reasons import Reason
from corral_im_restart.service import ImRestartConfig
from corral_model import longhorn as lh
from tests.unit.im_restart.cluster import (
    Cluster,
    deletes,
    im_pod,
    instance_manager,
    kube_node,
    one_node_cluster,
    ready_node,
    setting,
)

SETTLE = 2.0
BURST = (
    ("priority-class", "high-priority"),
    ("taint-toleration", "k=v:NoSchedule"),
    ("system-managed-components-node-selector", "disk:ssd"),
    ("storage-network", "ns/net"),
    ("instance-manager-pod-liveness-probe-timeout", "20"),
)


def _recreate(cluster: Cluster, uid: str) -> None:
    """Longhorn's IM controller: a new pod, built from the settings as they are now."""
    im = cluster.get("instancemanager", "im-1")
    node, kube = cluster.get("node", "node-1"), cluster.get("kubenode", "node-1")
    values = {name: obj.value for (token, name), obj in cluster.objects.items() if token == "setting"}
    cluster.put(im_pod(im, DangerZoneSettings.from_values(values), node, kube, uid=uid))


def _burst(cluster: Cluster) -> int:
    """Five settings half a second apart, each delete carried out and its pod recreated at once;
    then time enough for anything held to go. The number of pod deletes."""
    restarts = 0
    for i, (name, value) in enumerate(BURST):
        cluster.put(setting(name, value))
        for _ in range(5):  # half a second, decided every 0.1 s
            cluster.clock.now += 0.1
            if deletes(cluster.decide()):
                restarts += 1
                cluster.delete("pod", "im-1")
                _recreate(cluster, f"pod-im-1-{i}-{restarts}")
    for _ in range(50):
        cluster.clock.now += 0.1
        if deletes(cluster.decide()):
            restarts += 1
            cluster.delete("pod", "im-1")
            _recreate(cluster, f"pod-im-1-late-{restarts}")
    return restarts


def test_a_burst_of_five_settings_restarts_an_idle_im_once() -> None:
    cluster = one_node_cluster(config=DeciderConfig(settle=SETTLE))
    cluster.decide()
    assert _burst(cluster) == 1


def test_without_a_settle_each_setting_of_the_burst_restarts_it() -> None:
    """What the settle is for (and Longhorn's behaviour when each change reaches the IM controller)."""
    cluster = one_node_cluster(config=DeciderConfig(settle=0.0))
    cluster.decide()
    assert _burst(cluster) == len(BURST)


def test_while_settling_it_says_so_and_restarts_once_the_settings_are_quiet() -> None:
    cluster = one_node_cluster(config=DeciderConfig(settle=SETTLE))
    cluster.decide()
    cluster.put(setting("priority-class", "high-priority"))
    cluster.clock.now += 0.1
    assert deletes(cluster.decide()) == []
    [why] = cluster.decider.explain("InstanceManager/longhorn-system/im-1")
    assert why.reason == Reason.SETTLING and "priority-class" in why.detail, why
    due = cluster.decider.next_due()
    assert due is not None and due <= cluster.clock.now + SETTLE
    cluster.clock.now = due
    assert deletes(cluster.decide()) == ["im-1"]


def test_a_detach_is_never_delayed() -> None:
    """Busy when the setting changed, idle 0.1 s later: restarted at that very decision."""
    cluster = one_node_cluster(config=DeciderConfig(settle=SETTLE), engines={"e-1": "running"})
    cluster.decide()
    cluster.put(setting("priority-class", "high-priority"))
    cluster.clock.now += 0.1
    assert deletes(cluster.decide()) == []  # busy
    im = cluster.get("instancemanager", "im-1")
    idle = {"e-1": lh.InstanceProcess(status=lh.InstanceProcessStatus(state="stopped"))}
    cluster.put(msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, instance_engines=idle)))
    cluster.clock.now += 0.1
    assert deletes(cluster.decide()) == ["im-1"]


def test_the_deployed_service_settles() -> None:
    config = ImRestartConfig(service="im-restart", instance="i", nats_url="nats://x")
    assert config.decider_config().settle == SETTLE


def test_an_im_waiting_for_a_slot_settles_again_when_the_settings_change() -> None:
    """With one restart at a time: im-2 waits for im-1's slot; a further change makes it settle,
    and the slot im-1 frees does not restart it before the settings are quiet."""
    cluster = Cluster(DeciderConfig(settle=SETTLE, max_restarts=1))
    defaults = DangerZoneSettings.defaults()
    node, kube = ready_node("node-1"), kube_node("node-1")
    cluster.put(node, kube)
    for name in ("im-1", "im-2"):
        im = instance_manager(name, "node-1")
        cluster.put(im, im_pod(im, defaults, node, kube))
    cluster.resync()
    cluster.decide()
    cluster.put(setting("priority-class", "high-priority"))
    cluster.clock.now += SETTLE
    assert deletes(cluster.decide()) == ["im-1"], "one at a time"
    cluster.put(setting("taint-toleration", "k=v:NoSchedule"))  # im-2 must settle again
    cluster.clock.now += 0.1
    cluster.decide()
    cluster.delete("pod", "im-1")  # im-1's restart is done: its slot frees
    im_1 = cluster.get("instancemanager", "im-1")
    values = {"priority-class": "high-priority", "taint-toleration": "k=v:NoSchedule"}
    cluster.put(im_pod(im_1, DangerZoneSettings.from_values(values), node, kube, uid="pod-im-1-2"))
    cluster.clock.now += 0.1
    assert deletes(cluster.decide()) == [], "im-2 is still settling"
    cluster.clock.now += SETTLE
    assert deletes(cluster.decide()) == ["im-2"]
