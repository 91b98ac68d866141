"""setting-sync's service definition: what it reads and commands, its configuration, and the
`corral_setting_pending` gauge read from the decider at scrape time."""

from __future__ import annotations

from corral_setting_sync.commands import command_mode
from corral_setting_sync.service import DEFINITION, SettingSyncConfig, gauges, new_decider
from tests.unit.setting_sync.cluster import Cluster, component_pod, setting, volume


def test_definition() -> None:
    assert DEFINITION.name == "setting-sync"
    assert set(DEFINITION.reads) == {
        "setting",
        "volume",
        "instancemanager",
        "daemonset",
        "deployment",
        "pod",
        "node",
        "kubenode",
    }
    assert DEFINITION.commands == frozenset(
        {"setting", "daemonset", "deployment", "pod", "instancemanager", "event"}
    )
    assert DEFINITION.command_token("Event") == "event"
    assert DEFINITION.command_token("Pod") == "pod"
    assert DEFINITION.command_token("Volume") is None  # it never writes volumes


def test_config_reaches_the_decider() -> None:
    config = SettingSyncConfig(command_ttl_s=30.0, retry_backoff_s=90.0)
    decider = new_decider(config, lambda: 0.0)
    assert (decider.config.timing.command_ttl, decider.config.timing.retry_backoff) == (30.0, 90.0)


def test_pending_gauge_and_command_modes() -> None:
    cluster = Cluster()
    cluster.put(
        component_pod("instance-manager-n1"),
        volume("pvc-a", "attached"),
        setting("priority-class", "high", applied=True),
        setting("storage-network", ""),
    )
    cluster.resync()
    commands = cluster.decide()
    assert [command_mode(c) for c in commands] == ["applied", "applied"]
    [metric] = gauges(cluster.decider)
    assert metric.name == "corral_setting_pending"
    assert {s.labels["setting"]: s.value for s in metric.samples} == {
        "priority-class": 1,
        "storage-network": 0,
    }
    cluster.carry_out(commands)
    cluster.put(volume("pvc-a", "detached"))
    modes = sorted(command_mode(c) for c in cluster.decide())
    assert modes == ["pod"]
