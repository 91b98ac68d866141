"""`corral progress setting-sync`'s model: the service's own decider fed the events, read per
pending setting: what blocks it, which components are still on the old value, and the figures."""

from __future__ import annotations

from corral_model import longhorn as lh
from corral_setting_sync.progress import SettingProgress
from corral_setting_sync.service import DEFINITION
from tests.unit.setting_sync.cluster import Cluster, component_pod, setting, volume, workload

TOLERATION = "key1=value1:NoSchedule"


def followed() -> tuple[Cluster, SettingProgress]:
    """A Cluster whose events go to a progress model (it decides nothing itself)."""
    cluster = Cluster()
    model = SettingProgress(lambda: cluster.now)
    cluster.decider = model.decider
    cluster.put(
        workload(lh.Deployment, "csi-attacher"),
        component_pod("instance-manager-n1"),
        component_pod("instance-manager-n2"),
        volume("pvc-a", "attached"),
        volume("pvc-b", "attached"),
        setting("taint-toleration", TOLERATION),
        setting("priority-class", ""),
    )
    return cluster, model


def test_the_service_offers_this_model() -> None:
    assert DEFINITION.progress is SettingProgress


def test_nothing_is_complete_until_every_kind_is_listed() -> None:
    cluster, model = followed()
    assert not model.complete and not model.finished()
    cluster.resync()
    assert model.complete


def test_a_blocked_setting_its_blocker_and_its_components_on_the_old_value() -> None:
    cluster, model = followed()
    cluster.resync()
    assert model.heading() == "setting-sync: 1 danger-zone setting pending"
    [row] = model.groups()
    assert (row.node, row.done, row.in_flight, dict(row.blocked)) == (
        "taint-toleration",
        0,
        0,
        {"attached-volumes": 3},
    )
    assert model.details() == [
        "taint-toleration: attached-volumes: 2 attached volumes: pvc-a, pvc-b; 3 components on the old"
        " value: Deployment/csi-attacher, Pod/instance-manager-n1, Pod/instance-manager-n2"
    ]


def test_applying_then_applied_as_the_components_change() -> None:
    cluster, model = followed()
    cluster.resync()
    cluster.put(volume("pvc-a", "detached"), volume("pvc-b", "detached"))
    [row] = model.groups()
    assert (row.in_flight, row.blocked_total) == (3, 0)
    assert model.details()[0].startswith("taint-toleration: applying; 3 components")
    # The components carry the value: done, and the wave is over.
    values = {"taint-toleration": TOLERATION}
    cluster.put(
        workload(lh.Deployment, "csi-attacher", values),
        component_pod("instance-manager-n1", values=values),
        component_pod("instance-manager-n2", values=values),
    )
    [row] = model.groups()  # the row stays, done
    assert (row.node, row.done, row.in_flight, row.blocked_total) == ("taint-toleration", 3, 0, 0)
    assert model.details() == [] and model.heading() == "setting-sync: 0 danger-zone settings pending"
    assert model.finished()
