"""V2U-01: the admission rules of corral's two upgrade CRs, against the sandbox's API server (which
plays corral's webhook, `corral_v2admission`): every row of the scenario, with Longhorn's codes
and messages (longhorn-behaviour.md §5.3)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral_kube.client import api_client
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import Seed, default_seed, resized
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.fixtures.v2_admission import (
    MANAGERS,
    NODE_UPGRADES,
    UpgradeCRs,
    manager_body,
    node_upgrade_body,
    refusal,
)

pytestmark = pytest.mark.scenario

IMAGE = "longhornio/longhorn-instance-manager:v1.10.1"
DENIED = 'admission webhook "upgrades.v2.corral.longhorn.io" denied the request: '


@pytest.fixture
def sandbox_seed() -> Seed:
    return resized(default_seed(), nodes=3, volumes=0)


@pytest.fixture
async def single_node() -> AsyncIterator[Sandbox]:
    seed = resized(default_seed(), nodes=1, volumes=0)
    async with SandboxCluster(seed, sim_config=fast_config()) as cluster:
        api = await api_client(str(cluster.kubeconfig_path))
        try:
            yield Sandbox(cluster, api, seed.namespace)
        finally:
            await api.close()


async def test_a_single_node_cluster_is_refused(single_node: Sandbox) -> None:
    crs = UpgradeCRs(single_node)
    code, message = await refusal(crs.create(MANAGERS, manager_body("upgrade")))
    assert (code, message) == (
        422,
        DENIED + "single-node cluster is not supported for data engine live upgrade",
    )
    assert single_node.emulator.list("corral.longhorn.io", MANAGERS) == []


async def test_manager_create_and_update_rules(sandbox: Sandbox) -> None:
    crs = UpgradeCRs(sandbox)
    code, message = await refusal(crs.create(MANAGERS, manager_body("v1-upgrade", engine="v1")))
    assert (code, message) == (422, DENIED + "data engine v1 is not supported for data engine live upgrade")

    await crs.create(MANAGERS, manager_body("first", nodes=["node-1", "node-2"]))
    code, message = await refusal(crs.create(MANAGERS, manager_body("second")))
    assert (code, message) == (400, DENIED + "another dataEngineUpgradeManager is in progress")

    code, message = await refusal(crs.patch(MANAGERS, "first", {"spec": {"dataEngine": "v1"}}))
    assert (code, message) == (422, DENIED + "data engine v1 is not supported for data engine live upgrade")
    code, message = await refusal(crs.patch(MANAGERS, "first", {"spec": {"nodes": ["node-1"]}}))
    assert (code, message) == (422, DENIED + "nodes field is immutable")
    code, message = await refusal(crs.patch(MANAGERS, "first", {"spec": {"nodes": ["node-2", "node-1"]}}))
    assert message == DENIED + "nodes field is immutable"
    # a write that leaves both alone passes, and the refused ones changed nothing
    await crs.patch(MANAGERS, "first", {"metadata": {"labels": {"team": "storage"}}})
    stored = sandbox.emulator.get("corral.longhorn.io", MANAGERS, sandbox.namespace, "first")
    assert stored is not None and stored["spec"] == {"dataEngine": "v2", "nodes": ["node-1", "node-2"]}

    for finished in ("completed", "error"):
        await crs.set_state(MANAGERS, "first", "upgrading")
        await refusal(crs.create(MANAGERS, manager_body(f"after-{finished}")))
        await crs.set_state(MANAGERS, "first", finished)
        await crs.create(MANAGERS, manager_body(f"after-{finished}"))
        await crs.set_state(MANAGERS, f"after-{finished}", finished)


async def test_a_changed_data_engine_is_refused(sandbox: Sandbox) -> None:
    """`spec.dataEngine` immutable: v2 → v1 meets "not supported" first (above); a manager stored
    with another value (before the webhook existed) cannot be moved to v2 either."""
    crs = UpgradeCRs(sandbox)
    sandbox.emulator.load(
        "corral.longhorn.io",
        MANAGERS,
        [
            {
                **manager_body("legacy", engine="v3"),
                "metadata": {"name": "legacy", "namespace": sandbox.namespace},
            }
        ],
    )
    await crs.set_state(MANAGERS, "legacy", "error")
    code, message = await refusal(crs.patch(MANAGERS, "legacy", {"spec": {"dataEngine": "v2"}}))
    assert (code, message) == (422, DENIED + "spec.dataEngine field is immutable")


@pytest.mark.parametrize("missing", ["nodeID", "instanceManagerImage", "dataEngineUpgradeManager"])
async def test_a_node_upgrade_without_a_required_field_is_refused(sandbox: Sandbox, missing: str) -> None:
    crs = UpgradeCRs(sandbox)
    body = node_upgrade_body("upgrade-node-1", "node-1", "upgrade", IMAGE, **{missing: None})
    code, message = await refusal(crs.create(NODE_UPGRADES, body))
    assert (code, message) == (422, DENIED + f"{missing} is required")


async def test_node_upgrade_create_and_immutable_fields(sandbox: Sandbox) -> None:
    crs = UpgradeCRs(sandbox)
    v1 = node_upgrade_body("upgrade-node-1", "node-1", "upgrade", IMAGE, dataEngine="v1")
    code, message = await refusal(crs.create(NODE_UPGRADES, v1))
    assert (code, message) == (422, DENIED + "data engine v1 is not supported for data engine live upgrade")

    await crs.create(NODE_UPGRADES, node_upgrade_body("upgrade-node-1", "node-1", "upgrade", IMAGE))
    changes = {
        "nodeID": "node-2",
        "dataEngine": "v1",
        "instanceManagerImage": "longhornio/longhorn-instance-manager:v1.10.2",
        "dataEngineUpgradeManager": "other",
        "snapshotBeforeUpgrade": True,
    }
    for field, value in changes.items():
        code, message = await refusal(crs.patch(NODE_UPGRADES, "upgrade-node-1", {"spec": {field: value}}))
        assert (code, message) == (422, DENIED + f"{field} field is immutable")
    await crs.patch(NODE_UPGRADES, "upgrade-node-1", {"metadata": {"finalizers": ["longhorn.io"]}})
    await crs.set_state(NODE_UPGRADES, "upgrade-node-1", "initializing")
