"""V2U-04: one node at a time; the manager reaches `completed` when every node is `completed` or
`error` (acceptance-scenarios.md §5.4).

The rule itself (at most one node upgrade unfinished, and it is the manager's `upgradingNode`) is
judged at every write by the stack's observer. Here the nodes run in turn, and node-2 is NotReady
(listed in `spec.nodes`, so pending whatever its IM shows): each of its attempts waits in
`initializing` ("node node-2 is not ready") until the (short) node timeout aborts it, and after
`max_node_retries` attempts it is `error` for good, while the manager moves on to node-3 and ends
`completed` with a summary naming node-2 (the prototype stayed `upgrading` forever behind it,
§5.6). No volumes: the manager's pacing alone.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from corral_sandbox.control import SandboxControl
from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES, TERMINAL
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

RETRIES = 2


@pytest.fixture
def sandbox_seed() -> Seed:
    return scenario.v2_seed()


@pytest.fixture
def v2_upgrade_settings() -> dict[str, Any]:
    return {"retry_backoff_s": 1.0, "node_timeout_s": 2.0, "max_node_retries": RETRIES}


async def test_nodes_one_at_a_time_and_a_failed_node_does_not_hold_the_rest(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    control = SandboxControl.from_kubeconfig(sandbox.cluster.kubeconfig_path)
    await scenario.settled(sandbox)
    await control.set_node_ready("node-2", False)
    # listed, so node-2 is pending whatever its IM looks like while it is NotReady
    await scenario.start_upgrade(sandbox, nodes=scenario.NODES)

    manager = await scenario.wait_manager(sandbox, observer, "completed", within=120)
    nodes = manager["status"]["upgradeNodes"]
    assert nodes["node-1"]["state"] == "completed"
    assert nodes["node-3"]["state"] == "completed"
    assert nodes["node-2"]["state"] == "error"
    assert nodes["node-2"]["retries"] == RETRIES
    assert nodes["node-2"]["message"] == (
        f"failed {RETRIES} times, last: aborted (timeout) in initializing: node node-2 is not ready"
    )
    assert "2 of 3 nodes upgraded; failed: node-2" in manager["status"]["message"]

    for attempt in observer.created(NODE_UPGRADES)[1 : 1 + RETRIES]:
        messages = observer.values(NODE_UPGRADES, attempt["metadata"]["name"], "status", "message")
        assert "node node-2 is not ready" in messages, messages

    # in turn: each node upgrade was created only after the one before it had ended
    created = [u["metadata"]["name"] for u in observer.created(NODE_UPGRADES)]
    assert [u["spec"]["nodeID"] for u in observer.created(NODE_UPGRADES)] == [
        "node-1",
        *["node-2"] * RETRIES,
        "node-3",
    ]
    for before, after in itertools.pairwise(created):
        ended = observer.writes.index(
            next(
                w
                for w in observer.writes
                if w.plural == NODE_UPGRADES
                and w.name == before
                and str(((w.new or {}).get("status") or {}).get("state", "")) in TERMINAL
            )
        )
        made = next(
            i
            for i, w in enumerate(observer.writes)
            if w.plural == NODE_UPGRADES and w.operation == "CREATE" and w.name == after
        )
        assert ended < made, f"{after} created before {before} ended"
