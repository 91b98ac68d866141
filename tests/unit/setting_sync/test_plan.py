"""`corral plan setting-sync --snapshot FILE [--explain]` on a recorded cluster (tests/data/
setting_sync/cluster.yaml): the kit finds the service through its entry point and its own decider
plans: the toleration waits for three volumes (and says so in a Warning Event), the CSI limits are
applied at once, the invalid rebuild limit is reported, and the unmanaged longhorn-ui and the IM
pod are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corral_cli.main import main as corral
from corral_decision.plan import plan_snapshot
from corral_decision.registry import decision_service
from corral_setting_sync.service import DEFINITION

DATA = Path(__file__).resolve().parents[2] / "data" / "setting_sync"
CLUSTER = DATA / "cluster.yaml"


def test_the_entry_point_names_the_service() -> None:
    assert decision_service("setting-sync") is DEFINITION


def test_the_plan_applies_what_is_safe_and_explains_the_rest() -> None:
    commands, explanations = plan_snapshot(DEFINITION, yaml.safe_load(CLUSTER.read_text()), now=1000.0)
    # The Warning Events naming the blockers are reports, not decisions: never in a plan (the kit's
    # plan.py); the explanations below say the same.
    assert not [c for c in commands if c.target.kind == "Event"]
    assert sorted((c.verb, c.target.kind, c.target.name) for c in commands) == [
        ("patch", "Deployment", "csi-attacher"),
        ("patch-status", "Setting", "concurrent-replica-rebuild-per-node-limit"),
        ("patch-status", "Setting", "priority-class"),
        ("patch-status", "Setting", "storage-over-provisioning-percentage"),
        ("patch-status", "Setting", "system-managed-csi-components-resource-limits"),
        ("patch-status", "Setting", "taint-toleration"),
    ]
    why = {e.name: (e.reason, e.detail) for e in explanations}
    assert why["taint-toleration"] == ("attached-volumes", "3 attached volumes: pvc-a, pvc-b, pvc-d")
    assert why["system-managed-csi-components-resource-limits"] == (
        "applying",
        "1 component on the old value: Deployment/csi-attacher",
    )
    assert why["concurrent-replica-rebuild-per-node-limit"][0] == "invalid-value"


def test_cli_prints_the_recorded_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code = corral(["plan", "setting-sync", "--snapshot", str(CLUSTER), "--now", "1000", "--explain"])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == (DATA / "cluster.plan.jsonl").read_text().splitlines()
