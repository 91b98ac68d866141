"""Every scenario invariant can fail: recorded histories that break one rule each are fed to the
checker (and a clean one passes), and the observer's hooks, wired into a real sandbox, catch a
second node upgrade made by hand. In process, no services: a second or so."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.fixtures.sandbox import Sandbox
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import (
    MANAGERS,
    NODE_UPGRADES,
    UpgradeInvariants,
    Write,
    io_gap_violations,
)
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

Obj = dict[str, Any]


def obj(name: str, spec: Obj | None = None, status: Obj | None = None, **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": spec or {},
        "status": status or {},
    }


def changed(old: Obj, status: Obj | None = None, spec: Obj | None = None) -> Obj:
    new = copy.deepcopy(old)
    new["status"].update(status or {})
    new["spec"].update(spec or {})
    return new


class History:
    """Builds a history write by write, each UPDATE from the object as last written."""

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.current: dict[tuple[str, str], Obj] = {}

    def create(self, plural: str, new: Obj) -> Obj:
        self.writes.append(Write(plural, "CREATE", None, new))
        self.current[(plural, new["metadata"]["name"])] = new
        return new

    def update(self, plural: str, name: str, status: Obj | None = None, spec: Obj | None = None) -> Obj:
        old = self.current[(plural, name)]
        new = changed(old, status, spec)
        self.writes.append(Write(plural, "UPDATE", old, new))
        self.current[(plural, name)] = new
        return new

    def delete(self, plural: str, name: str) -> None:
        self.writes.append(Write(plural, "DELETE", self.current.pop((plural, name)), None))

    def judge(self) -> list[str]:
        return UpgradeInvariants().observe_all(self.writes)


def node_upgrade(name: str, node: str) -> Obj:
    return obj(name, {"nodeID": node, "dataEngineUpgradeManager": "upgrade", "dataEngine": "v2"})


def started(history: History) -> None:
    """A manager upgrading, and node-1's upgrade created and adopted."""
    history.create(MANAGERS, obj("upgrade", {"dataEngine": "v2"}))
    history.update(
        MANAGERS, "upgrade", {"state": "upgrading", "upgradeNodes": {"node-1": {"state": "pending"}}}
    )
    history.create(NODE_UPGRADES, node_upgrade("u-1", "node-1"))
    history.update(MANAGERS, "upgrade", {"message": "waiting for another node upgrade to finish"})
    history.update(
        MANAGERS,
        "upgrade",
        {"upgradingNode": "node-1", "upgradeNodes": {"node-1": {"state": "initializing"}}},
    )


def test_a_clean_history_passes() -> None:
    history = History()
    started(history)
    for step in scenario.NODE_STEPS:
        history.update(NODE_UPGRADES, "u-1", {"state": step})
    history.update(
        MANAGERS, "upgrade", {"upgradingNode": "", "upgradeNodes": {"node-1": {"state": "completed"}}}
    )
    history.create(NODE_UPGRADES, node_upgrade("u-2", "node-2"))
    history.update(MANAGERS, "upgrade", {"upgradingNode": "node-2"})
    history.update(NODE_UPGRADES, "u-2", {"state": "completed"})
    history.update(MANAGERS, "upgrade", {"upgradingNode": "", "state": "completed"})
    assert history.judge() == []


def test_a_node_upgrade_a_finalizer_holds_is_still_there_after_its_delete() -> None:
    """Deleted just after it was created, v2-upgrade's finalizer keeps it (marked) until the
    service lets it go: the manager naming its node meanwhile names an upgrade that exists (the
    explorer's v2-upgrade/node:created/target-deleted read it as gone)."""
    history = History()
    history.create(MANAGERS, obj("upgrade", {"dataEngine": "v2"}, {"state": "upgrading"}))
    held = node_upgrade("u-1", "node-1")
    held["metadata"]["finalizers"] = ["corral.longhorn.io/node-upgrade"]
    history.create(NODE_UPGRADES, held)
    history.writes.append(Write(NODE_UPGRADES, "DELETE", held, None))  # only marked
    history.update(MANAGERS, "upgrade", {"upgradingNode": "node-1"})
    assert history.judge() == []
    released = copy.deepcopy(held)
    released["metadata"].update(finalizers=[], deletionTimestamp="2027-01-15T08:00:00Z")
    history.writes.append(Write(NODE_UPGRADES, "UPDATE", held, released))  # the finalizer off: gone
    history.update(
        MANAGERS, "upgrade", {"upgradingNode": "", "upgradeNodes": {"node-1": {"state": "pending"}}}
    )
    assert history.judge() == []


def test_two_node_upgrades_in_flight_fail() -> None:
    history = History()
    started(history)
    history.create(NODE_UPGRADES, node_upgrade("u-2", "node-2"))
    [*found] = history.judge()
    assert any("2 node upgrades in flight" in v for v in found), found


def test_the_manager_naming_another_node_fails() -> None:
    history = History()
    started(history)
    history.update(MANAGERS, "upgrade", {"upgradingNode": "node-3"})
    found = history.judge()
    assert any("manager upgrade names node-3" in v for v in found), found


def test_bookkeeping_inside_the_adoption_window_must_name_the_node() -> None:
    history = History()
    history.create(MANAGERS, obj("upgrade", {"dataEngine": "v2"}, {"state": "upgrading"}))
    history.create(NODE_UPGRADES, node_upgrade("u-1", "node-1"))
    history.update(MANAGERS, "upgrade", {"upgradeNodes": {"node-1": {"state": "error"}}})
    found = history.judge()
    assert any("changed upgradeNodes without naming node-1" in v for v in found), found


def test_a_node_upgrade_ending_before_its_manager_named_it_fails() -> None:
    history = History()
    history.create(MANAGERS, obj("upgrade", {"dataEngine": "v2"}, {"state": "upgrading"}))
    history.create(NODE_UPGRADES, node_upgrade("u-1", "node-1"))
    history.update(NODE_UPGRADES, "u-1", {"state": "completed"})
    found = history.judge()
    assert any("ended before manager upgrade named its node" in v for v in found), found


def test_a_node_upgrade_created_while_the_manager_names_another_fails() -> None:
    history = History()
    started(history)
    history.update(NODE_UPGRADES, "u-1", {"state": "completed"})
    history.create(NODE_UPGRADES, node_upgrade("u-2", "node-2"))
    found = history.judge()
    assert any("created for node-2 while manager upgrade names node-1" in v for v in found), found


def test_an_unfinished_node_upgrade_under_a_finished_manager_fails() -> None:
    history = History()
    started(history)
    history.update(MANAGERS, "upgrade", {"state": "completed"})
    found = history.judge()
    assert any("unfinished while manager upgrade is completed" in v for v in found), found


def volume(name: str, engine: str, state: str = "attached", node: str = "node-1") -> Obj:
    return obj(name, {"dataEngine": engine, "nodeID": node, "image": "img"}, {"state": state})


def test_an_attached_v2_volume_detached_fails_unless_asked() -> None:
    history = History()
    history.create("volumes", volume("vol-1", "v2"))
    history.create("volumes", volume("vol-2", "v2"))
    history.update("volumes", "vol-1", {"state": "detaching"})
    history.update("volumes", "vol-2", spec={"nodeID": ""})
    history.update("volumes", "vol-2", {"state": "detaching"})
    found = history.judge()
    assert len(found) == 1 and "vol-1" in found[0] and "went detaching" in found[0], found


@pytest.mark.parametrize(
    ("plural", "start", "status", "spec", "why"),
    [
        ("volumes", volume("v1-vol", "v1"), None, {"image": "other"}, "v1 volume's spec changed: ['image']"),
        (
            "volumes",
            volume("v1-vol", "v1"),
            {"state": "detached"},
            None,
            "v1 volume went attached -> detached",
        ),
        (
            "replicas",
            obj("v1-r", {"dataEngine": "v1"}),
            None,
            {"desireState": "stopped"},
            "v1 replica's desireState",
        ),
    ],
)
def test_v1_changes_once_an_upgrade_exists_fail(
    plural: str, start: Obj, status: Obj | None, spec: Obj | None, why: str
) -> None:
    before = History()
    before.create(plural, start)
    before.update(plural, start["metadata"]["name"], status, spec)
    assert before.judge() == [], "no manager yet: v1 may change"
    after = History()
    after.create(plural, start)
    after.create(MANAGERS, obj("upgrade"))
    after.update(plural, start["metadata"]["name"], status, spec)
    found = after.judge()
    assert any(why in v for v in found), found


def test_v1_deletes_and_restarts_fail_v2_and_idle_ones_do_not() -> None:
    history = History()
    for engine in ("v1", "v2"):
        history.create("instancemanagers", obj(f"idle-{engine}", {"dataEngine": engine}))
        serving = {"instanceReplicas": {f"r-{engine}": {"status": {"state": "running"}}}}
        history.create("instancemanagers", obj(f"im-{engine}", {"dataEngine": engine}, serving))
        pod = obj(f"im-{engine}")
        pod["metadata"]["labels"] = {"longhorn.io/component": "instance-manager"}
        history.create("pods", pod)
        history.create("replicas", obj(f"r-{engine}", {"dataEngine": engine}))
    history.create(MANAGERS, obj("upgrade"))
    for engine in ("v2", "v1"):
        history.update("pods", f"im-{engine}", {"containerStatuses": [{"restartCount": 1}]})
        history.delete("pods", f"im-{engine}")
        history.delete("replicas", f"r-{engine}")
        history.delete("instancemanagers", f"im-{engine}")
        history.delete("instancemanagers", f"idle-{engine}")
    found = history.judge()
    assert [v.split(": ", 1)[1] for v in found] == [
        "v1 instance manager's container restarted (0 -> 1)",
        "pod of v1 instance manager deleted (uid uid-im-v1)",
        "v1 replica deleted",
        "v1 instance manager deleted while serving",
    ], found


def test_an_io_gap_at_the_budget_fails() -> None:
    assert io_gap_violations({"vol-1": [0.1, 0.3], "vol-2": []}, budget=0.5) == []
    [found] = io_gap_violations({"vol-1": [0.1, 0.5]}, budget=0.5)
    assert "vol-1" in found and "0.500s" in found


@pytest.fixture
def sandbox_seed() -> Any:
    return scenario.v2_seed()


async def test_the_hooks_see_writes_inside_the_api_server(sandbox: Sandbox) -> None:
    """No services: a person creating a second node upgrade by hand is caught at that write."""
    observer = UpgradeObserver(sandbox)
    await scenario.create_manager(sandbox)
    for node in ("node-1", "node-2"):
        body = {
            "apiVersion": "corral.longhorn.io/v1alpha1",
            "kind": "NodeDataEngineUpgrade",
            "metadata": {"name": f"by-hand-{node}", "namespace": sandbox.namespace},
            "spec": {
                "nodeID": node,
                "dataEngine": "v2",
                "instanceManagerImage": scenario.NEW_IM,
                "dataEngineUpgradeManager": scenario.MANAGER,
            },
        }
        await sandbox.objects_api.create_namespaced_custom_object(
            "corral.longhorn.io", "v1alpha1", sandbox.namespace, NODE_UPGRADES, body
        )
    assert any("2 node upgrades in flight" in v for v in observer.violations), observer.violations
    with pytest.raises(AssertionError, match="node upgrades in flight"):
        await observer.holds()
