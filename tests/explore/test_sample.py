"""The explorer's sample in `make test`: a few cheap cells per service, each a whole world (sandbox,
NATS, watcher, actuator, the service in this loop), so the matrix's machinery cannot rot. A cell
that still fails is a strict xfail naming why: it turns into a failure to flip once it passes.

The whole matrix: `python -m tests.explore` or `pytest -m explore`. (The known failures that
show only as a 20 s stall, a NodeDataEngineUpgrade deleted mid-flight, are left to the matrix.)
"""

from __future__ import annotations

import pytest

from tests.explore.cases import explored
from tests.explore.model import Cell, Outcome
from tests.fixtures.nats import NatsServer

pytestmark = pytest.mark.integration

SAMPLE = [
    pytest.param(
        Cell("engine-upgrade", "in-flight-live", "api-409"), id="engine-upgrade/in-flight-live/api-409"
    ),
    pytest.param(
        Cell("engine-upgrade", "waiting", "duplicate-events"), id="engine-upgrade/waiting/duplicate-events"
    ),
    pytest.param(Cell("engine-upgrade", "rolled-back", "api-409"), id="engine-upgrade/rolled-back/api-409"),
    pytest.param(Cell("im-restart", "idle", "instance-starting"), id="im-restart/idle/instance-starting"),
    pytest.param(
        Cell("im-restart", "idle", "instance-starting-mid-delete"),
        id="im-restart/idle/instance-starting-mid-delete",
    ),
    pytest.param(Cell("im-restart", "busy", "volume-detached"), id="im-restart/busy/volume-detached"),
    pytest.param(Cell("im-restart", "deleting", "api-500"), id="im-restart/deleting/api-500"),
    pytest.param(Cell("setting-sync", "pending", "api-409"), id="setting-sync/pending/api-409"),
    pytest.param(
        Cell("setting-sync", "applying", "out-of-order-events"),
        id="setting-sync/applying/out-of-order-events",
    ),
    pytest.param(
        Cell("v2-upgrade", "node:switching-over", "api-409"), id="v2-upgrade/node:switching-over/api-409"
    ),
    pytest.param(
        Cell("v2-upgrade", "node:upgrading-instance-manager", "node-notready"),
        id="v2-upgrade/node:upgrading-instance-manager/node-notready",
    ),
    pytest.param(
        Cell("v2-upgrade", "node:initializing", "volume-deleted"),
        id="v2-upgrade/node:initializing/volume-deleted",
    ),
    # Found by the matrix: deleted as its IM was replaced, the node upgrade took the node's flag
    # with it and the volumes detached (7 runs in 10 before v2-upgrade held it by a finalizer).
    pytest.param(
        Cell("v2-upgrade", "node:upgrading-instance-manager", "target-deleted"),
        id="v2-upgrade/node:upgrading-instance-manager/target-deleted",
    ),
]


@pytest.mark.parametrize("cell", SAMPLE)
async def test_a_cell_of_the_matrix(cell: Cell, nats_server: NatsServer) -> None:
    verdict = await explored(cell, nats_server)
    assert verdict.outcome is Outcome.PASS, f"{cell.id}: {verdict.outcome}: {verdict.detail}"
