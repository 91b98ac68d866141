"""`kubectl get lhum,lhnu` (and `-o wide`) shows what the decider writes: every printer column of
the two CRDs names a status field that a whole upgrade actually writes (or the node upgrade's spec
as the manager creates it), so a renamed or dropped field fails here instead of showing an empty
column. The chart ships the same CRDs."""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral_model.envelopes import Verb
from corral_v2_upgrade.commands import MANAGER_KIND, NODE_UPGRADE_KIND
from corral_v2_upgrade.config import DeciderConfig
from tests.unit.v2_upgrade.world import cluster, manager, volume

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
CRDS = {
    MANAGER_KIND: ("corral-dataengineupgrademanagers.yaml", "lhum"),
    NODE_UPGRADE_KIND: ("corral-nodedataengineupgrades.yaml", "lhnu"),
}


@functools.cache
def written() -> dict[str, set[str]]:
    """Per CR kind, the `.status.x` / `.spec.x` JSON paths a whole upgrade (with a failed node, an
    abort and a retry) writes."""
    world = cluster(
        volumes={"vol-a": "node-1", "vol-b": "node-2"},
        config=DeciderConfig(node_timeout=60, max_retries=2),
    )
    world.put(*volume("vol-off", "node-1", attached=False), manager())
    world.stalled.add("vol-b")  # node-2 times out, is aborted, retried, then fails
    world.start()
    assert world.run(limit=600) == "completed"
    paths: dict[str, set[str]] = defaultdict(set)
    for command in world.applied:
        kind = command.target.kind
        if command.verb is Verb.PATCH_STATUS:
            paths[kind].update("." + c.path.strip("/").replace("/", ".") for c in command.changes)
        elif command.verb is Verb.CREATE and command.body is not None:
            paths[kind].update(f".spec.{field}" for field in command.body.get("spec", {}))
    return paths


def _version(base: Path, file: str) -> dict[str, Any]:
    crd = yaml.safe_load((base / file).read_text())
    [version] = crd["spec"]["versions"]
    return dict(version)


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_column_shows_a_field_the_decider_writes(kind: str) -> None:
    file, _ = CRDS[kind]
    columns = _version(DEPLOY / "crds", file)["additionalPrinterColumns"]
    for column in columns:
        path = column["jsonPath"]
        if path == ".metadata.creationTimestamp":
            continue
        assert path in written()[kind], f"{kind} column {column['name']!r}: {path} is never written"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_state_and_progress_by_default_and_the_message_wide(kind: str) -> None:
    file, short = CRDS[kind]
    crd = yaml.safe_load((DEPLOY / "crds" / file).read_text())
    assert short in crd["spec"]["names"]["shortNames"]
    listed = _version(DEPLOY / "crds", file)["additionalPrinterColumns"]
    columns = {c["name"]: c for c in listed}
    assert len(columns) == len(listed)  # no column twice
    default = {name for name, c in columns.items() if c.get("priority", 0) == 0}
    wide = {name for name, c in columns.items() if c.get("priority", 0) == 1}
    assert {"State", "Progress"} <= default
    assert columns["State"]["jsonPath"] == ".status.state"
    assert columns["Progress"]["jsonPath"] == ".status.progress"
    assert {"Message", "In State"} <= wide
    assert columns["In State"]["type"] == "date"  # kubectl shows it as an age: the time in state


def test_the_chart_ships_the_same_crds() -> None:
    for file, _ in CRDS.values():
        chart = DEPLOY / "chart" / "corral" / "crds" / file
        assert (
            chart.resolve() == (DEPLOY / "crds" / file).resolve()
            or chart.read_text() == (DEPLOY / "crds" / file).read_text()
        )


def test_progress_is_done_of_total() -> None:
    """What the Progress column reads: `<done>/<total>` nodes (manager) or volumes (node upgrade)."""
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    world.run()
    assert world.get("dataengineupgrademanager", "upgrade").status.progress == "3/3"
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.progress == "1/1"
