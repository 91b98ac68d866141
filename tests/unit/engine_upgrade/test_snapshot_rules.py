"""Every rule of longhorn-behaviour.md §1.3 on one recorded cluster (tests/data/engine_upgrade/
rules.json): one volume per rule, named after it, and the plan the CLI prints for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from corral_cli.main import main as corral
from corral_decision.plan import plan_snapshot
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.service import DEFINITION

DATA = Path(__file__).resolve().parents[2] / "data" / "engine_upgrade"
RULES = DATA / "rules.json"

# volume → the first rule that holds it back (None: chosen in the first wave).
EXPECTED: dict[str, Reason | None] = {
    # owner n1: one upgrade already in flight, limit 2 → one free slot, first by name
    "busy-1": Reason.IN_PROGRESS,
    "cand-a": None,
    "cand-b": Reason.NODE_LIMIT_REACHED,
    # owner n2: an EI in state `deploying` counts as ready when its node map is true; a detached DR
    # volume is offline-upgradable; a detached expanding one waits (deviation from HEAD, AEU-10)
    "deploying-current": None,
    "offline-dr": None,
    "offline-expanding": Reason.EXPANDING,
    # owner n3: each live-upgradable condition, in Longhorn's order
    "degraded": Reason.DEGRADED,
    "faulted": Reason.NOT_HEALTHY,
    "dr-volume": Reason.DR_VOLUME,
    "expanding": Reason.EXPANDING,
    "migrating-spec": Reason.MIGRATING,
    "migrating-status": Reason.MIGRATING,
    "strict-local": Reason.STRICT_LOCAL,
    "attaching": Reason.NOT_ATTACHED_OR_DETACHED,
    "detaching": Reason.NOT_ATTACHED_OR_DETACHED,
    "incompatible": Reason.INCOMPATIBLE_CONTROLLER_API,
    "current-ei-missing": Reason.CURRENT_IMAGE_MISSING,
    # readiness on the nodes involved
    "offline-current-ei-missing": Reason.IMAGE_NOT_READY,
    "current-not-ready-on-replica": Reason.IMAGE_NOT_READY,
    "no-replica-nodes": Reason.NO_REPLICA_NODES,
    "unscheduled-replicas": Reason.NO_REPLICA_NODES,
    "default-not-ready-on-replica": Reason.DEFAULT_IMAGE_NOT_READY,
    "default-not-ready-on-attached-node": Reason.DEFAULT_IMAGE_NOT_READY,
    # deliberate deviation: v2 filtered before the limit
    "v2-detached": Reason.V2_VOLUME,
    "already-default": Reason.ALREADY_DEFAULT,
}


def test_every_rule_names_its_volume() -> None:
    commands, explanations = plan_snapshot(DEFINITION, json.loads(RULES.read_text()), now=1000.0)
    chosen = {c.target.name for c in commands}
    reasons: dict[str, str | None] = {e.name: e.reason for e in explanations}
    reasons.update(dict.fromkeys(chosen))
    assert reasons == EXPECTED
    assert not chosen & {e.name for e in explanations}


def test_commands_set_the_default_image_with_preconditions() -> None:
    commands, _ = plan_snapshot(DEFINITION, json.loads(RULES.read_text()), now=1000.0)
    by_name = {c.target.name: c for c in commands}
    live, offline = by_name["cand-a"], by_name["offline-dr"]
    for command in (live, offline):
        assert [(c.path, c.value) for c in command.changes] == [
            ("/spec/image", "longhornio/longhorn-engine:v1.10.0")
        ]
        assert command.service == "engine-upgrade" and command.target.kind == "Volume"
        assert command.created_at == 1000.0
    assert {p.path: p.value for p in live.preconditions} == {
        "/spec/image": "longhornio/longhorn-engine:v1.9.3",
        "/status/currentImage": "longhornio/longhorn-engine:v1.9.3",
        "/status/state": "attached",
        "/status/ownerID": "n1",
        "/status/robustness": "healthy",
    }
    # an offline upgrade does not rest on robustness, so it does not test it
    assert {p.path for p in offline.preconditions} == {
        "/spec/image",
        "/status/currentImage",
        "/status/state",
        "/status/ownerID",
    }


def test_cli_prints_the_recorded_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code = corral(["plan", "engine-upgrade", "--snapshot", str(RULES), "--now", "1000", "--explain"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == (DATA / "rules.plan.jsonl").read_text().splitlines()
    first = json.loads(printed[0])
    assert set(first) >= {"service", "verb", "kind", "namespace", "name", "changes", "preconditions"}


def test_cli_reads_yaml_and_omits_explanations_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump(json.loads(RULES.read_text())))
    assert (
        corral(["plan", "engine-upgrade", "--snapshot", str(snapshot), "--now", "1970-01-01T00:16:40Z"]) == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["name"] for line in lines] == ["cand-a", "deploying-current", "offline-dr"]


@pytest.mark.parametrize(
    ("content", "message"),
    [("[1, 2]", "expected a Kubernetes List"), ('{"kind": "List", "items": [{"metadata": {}}]}', "no kind")],
)
def test_cli_refuses_bad_snapshots_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    snapshot = tmp_path / "bad.json"
    snapshot.write_text(content)
    assert corral(["plan", "engine-upgrade", "--snapshot", str(snapshot)]) == 2
    assert message in capsys.readouterr().err


def test_cli_reports_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert corral(["plan", "engine-upgrade", "--snapshot", str(tmp_path / "absent.json")]) == 2
    assert "absent.json" in capsys.readouterr().err
