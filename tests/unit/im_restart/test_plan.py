"""`corral plan im-restart --snapshot FILE [--explain]` on a recorded cluster (tests/data/im_restart/
cluster.yaml): the kit finds the service through its entry point and its own decider plans."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corral_cli.main import main as corral
from corral_decision.plan import plan_snapshot
from corral_im_restart.service import DEFINITION

DATA = Path(__file__).resolve().parents[2] / "data" / "im_restart"
CLUSTER = DATA / "cluster.yaml"


def test_the_plan_restarts_the_idle_and_failed_ims_and_explains_the_others() -> None:
    commands, explanations = plan_snapshot(DEFINITION, yaml.safe_load(CLUSTER.read_text()), now=1000.0)
    assert sorted((c.verb, c.target.kind, c.target.name) for c in commands) == [
        ("delete", "Pod", "im-failed"),
        ("delete", "Pod", "im-idle"),
        ("patch-status", "InstanceManager", "im-busy"),
        ("patch-status", "InstanceManager", "im-idle"),
    ]
    assert {e.name: (e.reason, e.detail) for e in explanations} == {
        "im-busy": ("busy", "vol-1-e-0, vol-2-r-1"),
        "im-failed": (
            "command-pending",
            "pod-failed: pod phase Failed; instance manager im-failed on node node-2",
        ),
        "im-starting": ("not-running", "instance manager starting, pod starting"),
        "im-synced": ("settings-synced", ""),
    }


def test_cli_prints_the_recorded_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code = corral(["plan", "im-restart", "--snapshot", str(CLUSTER), "--now", "1000", "--explain"])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == (DATA / "cluster.plan.jsonl").read_text().splitlines()


def test_a_pod_delete_holds_to_its_node_as_read() -> None:
    """Decided on a Ready node, a delete landing after the node went NotReady must be refused (the
    explorer's setting-sync/applying/node-notready cell saw im-restart's land): each delete carries
    its Longhorn node's uid and resourceVersion, which the actuator checks just before it."""
    snapshot = yaml.safe_load(CLUSTER.read_text())
    commands, _ = plan_snapshot(DEFINITION, snapshot, now=1000.0)
    nodes = {
        item["metadata"]["name"]: item["metadata"]
        for item in snapshot["items"]
        if item["kind"] == "Node" and item["apiVersion"].startswith("longhorn.io")
    }
    deletes = [c for c in commands if c.verb == "delete"]
    assert deletes
    for delete in deletes:
        [on_node] = [r for r in delete.related if r.target.kind == "Node"]
        read = nodes[on_node.target.name]
        assert on_node.target.uid == read.get("uid", "")
        assert [(h.path, h.value) for h in on_node.holds] == [
            ("/metadata/resourceVersion", read["resourceVersion"])
        ]
