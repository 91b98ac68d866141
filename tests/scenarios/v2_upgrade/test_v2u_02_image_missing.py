"""V2U-02: the new default IM image is missing from a node's pulled images → the manager ends in
`error` with a message naming that node, and no node upgrade is created (acceptance-scenarios.md
§5.4). The other nodes have pulled it; the check covers every node to upgrade, not only listed
ones (the LEP's rule, services/v2-upgrade/README.md)."""

from __future__ import annotations

from typing import Any

from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.observer import UpgradeObserver


async def test_a_node_without_the_image_fails_the_manager(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.pull_image(sandbox, scenario.NEW_IM, nodes=("node-1", "node-3"))
    await scenario.set_target_image(sandbox, scenario.NEW_IM)
    await scenario.create_manager(sandbox)

    async def ended() -> dict[str, Any] | None:
        manager = await scenario.manager(sandbox)
        return manager if scenario.state(manager) in ("error", "completed") else None

    manager = await sandbox.wait_for(ended, within=60, what="the manager to end", invariant=observer.holds)
    assert scenario.state(manager) == "error"
    message = str(manager["status"]["message"])
    assert f"failed to find default instance manager image {scenario.NEW_IM} in node node-2" in message
    assert "node-1" not in message and "node-3" not in message
    assert await scenario.node_upgrades(sandbox) == []
