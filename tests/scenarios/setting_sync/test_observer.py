"""The scenarios' invariants can fail: on the sandbox alone (no corral service), deleting a busy
instance manager's pod while its volume is attached, or claiming `applied=true` while components
still carry the old value, is caught by the next observation."""

from __future__ import annotations

import pytest

from tests.fixtures.sandbox import Sandbox
from tests.scenarios.setting_sync.scenario import NS, Observer
from tests.scenarios.setting_sync.volumes import attached

pytestmark = pytest.mark.scenario


async def test_a_busy_instance_manager_pod_deleted_while_attached_is_caught(sandbox: Sandbox) -> None:
    observer = Observer(sandbox)
    await attached(sandbox, "vol-1")
    await observer.until(lambda: bool(observer.busy), what="a busy instance manager recorded")
    [busy] = observer.busy
    await sandbox.core.delete_namespaced_pod(busy, NS)
    with pytest.raises(AssertionError, match=f"the pod of busy instance manager {busy} was deleted"):
        observer.check()


async def test_applied_true_over_a_lagging_component_is_caught(sandbox: Sandbox) -> None:
    observer = Observer(sandbox)
    await observer.set_setting("priority-class", "system-cluster-critical")
    observer.check()  # the stale applied=true of before the change is not a claim
    # a decider's false, then a wrong true (the components were never changed)
    await sandbox.patch_status("settings", "priority-class", {"status": {"applied": False}})
    observer.check()
    await sandbox.patch_status("settings", "priority-class", {"status": {"applied": True}})
    with pytest.raises(
        AssertionError, match=r"priority-class applied=true while .* still carry the old value"
    ):
        observer.check()
