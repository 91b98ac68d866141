"""`max-concurrent-im-restarts` in the sandbox: with a cluster-wide limit of 1, a setting that every
idle IM lags restarts them one at a time, each pod deleted only once the previous IM runs again on
its new pod (judged at every IM pod delete, inside the API server: scenario.py), and all of them in
the end. Longhorn has no such limit (the default, 0, is unlimited)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.im_restart.scenario import ImObserver
from tests.scenarios.im_restart.test_im import restarted, uids

pytestmark = pytest.mark.scenario


@pytest.fixture
def im_restart_settings() -> dict[str, Any]:
    return {"max_concurrent_im_restarts": 1}


async def test_a_cluster_wide_limit_of_one_rolls_the_restarts(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    observer.restart_limit = 1
    before = await uids(observer)
    assert len(before) == 3
    await sandbox.create_priority_class("rolled")
    await observer.set_setting("priority-class", "rolled")
    pods = await restarted(sandbox, observer, before, within=30)
    assert all(p["spec"]["priorityClassName"] == "rolled" for p in pods.values())
    assert observer.most_restarting == 1 and sum(observer.deletes.values()) == 3
