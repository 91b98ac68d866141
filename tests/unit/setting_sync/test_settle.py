"""Group A settings written in quick succession while every volume is detached cost each
component pod one restart, not one per setting; the last volume detaching is never held
(issue 24)."""

from __future__ import annotations

from corral_model.envelopes import Verb
from corral_setting_sync.core import DeciderConfig
from corral_setting_sync.service import SettingSyncConfig
from tests.unit.setting_sync.cluster import Cluster, component_pod, setting, volume

SETTLE = 2.0
BURST = (
    ("priority-class", "high-priority"),
    ("taint-toleration", "k=v:NoSchedule"),
    ("system-managed-components-node-selector", "disk:ssd"),
)


def _cluster(settle: float, state: str = "detached") -> Cluster:
    cluster = Cluster()
    cluster.decider.config = DeciderConfig(settle=settle)
    cluster.put(component_pod("im-1"), component_pod("im-2", node="node-2"), volume("pvc-a", state))
    cluster.resync()
    cluster.settle()
    return cluster


def _restarts(cluster: Cluster) -> dict[str, int]:
    """The burst, half a second apart, every command carried out at once; then quiet. Pod deletes
    per pod (name)."""
    counts: dict[str, int] = {}

    def tick() -> None:
        cluster.now += 0.1
        commands = cluster.decide()
        for c in commands:
            if c.verb is Verb.DELETE:
                counts[c.target.name] = counts.get(c.target.name, 0) + 1
        cluster.carry_out(commands)

    for name, value in BURST:
        cluster.put(setting(name, value))
        for _ in range(5):
            tick()
    for _ in range(40):
        tick()
    return counts


def test_a_burst_restarts_each_pod_once() -> None:
    assert _restarts(_cluster(SETTLE)) == {"im-1": 1, "im-2": 1}


def test_without_a_settle_each_setting_restarts_each_pod() -> None:
    assert _restarts(_cluster(0.0)) == {"im-1": len(BURST), "im-2": len(BURST)}


def test_the_last_detach_is_never_held() -> None:
    cluster = _cluster(SETTLE, state="attached")
    cluster.put(setting("priority-class", "high-priority"))
    cluster.now += 0.1
    assert [c for c in cluster.decide() if c.verb is Verb.DELETE] == []  # attached
    cluster.put(volume("pvc-a", "detached"))
    cluster.now += 0.1
    deleted = sorted(c.target.name for c in cluster.decide() if c.verb is Verb.DELETE)
    assert deleted == ["im-1", "im-2"]


def test_the_deployed_service_settles() -> None:
    config = SettingSyncConfig(service="setting-sync", instance="i", nats_url="nats://x")
    assert config.decider_config().settle == SETTLE
