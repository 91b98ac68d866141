"""`corral plan v2-upgrade --snapshot FILE [--explain]` on a recorded cluster (tests/data/v2_upgrade/
cluster.yaml): which nodes would be upgraded, in which order, and which volumes block which node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corral_cli.main import main as corral
from corral_decision.plan import plan_snapshot
from corral_v2_upgrade.service import DEFINITION

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
