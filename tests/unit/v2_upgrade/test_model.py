"""The upgrade CRs as real objects carry them: maps and lists may be null or absent, and the CRDs
show state, node and progress in `kubectl get lhum,lhnu`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from corral_model import longhorn as lh

CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"


def test_null_maps_and_lists_read_as_empty() -> None:
    manager = msgspec.json.decode(
        b'{"metadata":{"name":"m"},"spec":{"dataEngine":"v2","nodes":null},'
        b'"status":{"state":"upgrading","upgradeNodes":null}}',
        type=lh.DataEngineUpgradeManager,
    )
    assert manager.spec.nodes == () and manager.status.upgrade_nodes == {}
    node = msgspec.json.decode(
        b'{"metadata":{"name":"n"},"status":{"volumes":null,"replicaVolumes":null}}',
        type=lh.NodeDataEngineUpgrade,
    )
    assert node.status.volumes == {} and node.status.replica_volumes == ()
    snapshot = msgspec.json.decode(b'{"metadata":{"name":"s"},"spec":{"labels":null}}', type=lh.Snapshot)
    assert snapshot.spec.labels == {}


def _crd(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((CRDS / name).read_text()))


@pytest.mark.parametrize(
    ("file", "short", "columns"),
    [
        (
            "corral-dataengineupgrademanagers.yaml",
            "lhum",
            {".status.state", ".status.upgradingNode", ".status.progress"},
        ),
        ("corral-nodedataengineupgrades.yaml", "lhnu", {".spec.nodeID", ".status.state", ".status.progress"}),
    ],
)
def test_kubectl_get_shows_state_node_and_progress(file: str, short: str, columns: set[str]) -> None:
    crd = _crd(file)
    assert short in crd["spec"]["names"]["shortNames"]
    [version] = crd["spec"]["versions"]
    assert columns <= {c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert version["subresources"] == {"status": {}}
