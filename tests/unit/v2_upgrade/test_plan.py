"""`corral plan v2-upgrade --snapshot FILE [--explain]` on a recorded cluster (tests/data/v2_upgrade/
cluster.yaml): which nodes would be upgraded, in which order, and which volumes block which node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from corral_cli.main import main as corral
from corral_decision.plan import plan_snapshot
from corral_model.kinds import KINDS
from corral_v2_upgrade.service import DEFINITION
from tests.unit.v2_upgrade.world import World, cluster, manager, replica

DATA = Path(__file__).resolve().parents[2] / "data" / "v2_upgrade"
CLUSTER = DATA / "cluster.yaml"


def test_the_plan_orders_the_nodes_and_names_the_blocking_volume() -> None:
    commands, explanations = plan_snapshot(DEFINITION, yaml.safe_load(CLUSTER.read_text()), now=1000.0)
    [first] = commands
    assert (first.target.name, first.reason) == ("upgrade", "undefined -> initializing")
    nodes = [(e.name, e.reason, e.detail) for e in explanations if e.kind == "Node"]
    assert nodes == [
        ("node-1", "queued", "#1 of 2"),
        (
            "node-2",
            "queued",
            "#2 of 2; blocked: volume pvc-x has only 1 replica, which is not supported for live upgrade",
        ),
        ("node-3", "completed", "Old instance manager is not running for node node-3"),
    ]


def test_cli_prints_the_recorded_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code = corral(["plan", "v2-upgrade", "--snapshot", str(CLUSTER), "--now", "1000", "--explain"])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == (DATA / "cluster.plan.jsonl").read_text().splitlines()


def _snapshot(world: World) -> dict[str, Any]:
    """The world's objects as `kubectl get -o json` would list them."""
    items = []
    for (token, _), obj in sorted(world.objects.items()):
        info = KINDS[token]
        items.append({"apiVersion": info.api_version, "kind": info.kind, **msgspec.to_builtins(obj)})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_halfway_the_node_in_flight_comes_first_then_the_queue_with_its_blockers() -> None:
    """A snapshot taken mid-upgrade: node-1 done, node-2 in flight (its volume's switch-over hangs),
    node-3 queued behind it and blocked by its single-replica volume pvc-x, node-4 queued."""
    world = cluster(nodes=4, volumes={"vol-a": "node-1", "vol-b": "node-2", "pvc-x": "node-3"})
    vol = world.get("volume", "pvc-x")
    world.put(msgspec.structs.replace(vol, spec=msgspec.structs.replace(vol.spec, number_of_replicas=1)))
    for node in ("node-1", "node-2"):
        world.delete("replica", replica("pvc-x", node).metadata.name)
    world.stalled.add("vol-b")
    world.put(manager())
    world.start()
    for _ in range(60):
        world.step(tick=1.0)
    assert world.get("dataengineupgrademanager", "upgrade").status.upgrading_node == "node-2"
    _, explanations = plan_snapshot(DEFINITION, _snapshot(world), now=world.clock.now)
    nodes = [(e.name, e.reason, e.detail) for e in explanations if e.kind == "Node"]
    assert nodes == [
        ("node-2", "upgrading", "#1 of 3"),
        (
            "node-3",
            "queued",
            "#2 of 3; blocked: volume pvc-x has only 1 replica, which is not supported for live upgrade",
        ),
        ("node-4", "queued", "#3 of 3"),
        ("node-1", "completed", ""),
    ]
    [node_upgrade] = [e for e in explanations if e.kind == "NodeDataEngineUpgrade" and e.group == "node-2"]
    assert (node_upgrade.reason, node_upgrade.detail) == (
        "switching-over",
        "volume vol-b is not switched over to node-1",
    )
