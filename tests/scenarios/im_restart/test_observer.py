"""The observer's idle-period invariant can fail, and spares a pod built from stale settings.

No corral service runs here: the test deletes IM pods itself, as a wrong im-restart would, and
reads what the observer concluded."""

from __future__ import annotations

from tests.fixtures.sandbox import Sandbox
from tests.scenarios.im_restart.scenario import ImObserver


async def _delete_running_pod(sandbox: Sandbox, observer: ImObserver, name: str) -> None:
    uid = await observer.pod_uid(name)
    await sandbox.wait_for(lambda: observer.running_pod(name), within=20, what=f"{name}'s pod running")
    await sandbox.core.delete_namespaced_pod(name, sandbox.namespace)
    await sandbox.wait_for(lambda: observer.running_pod(name, not_uid=uid), within=20, what="a new pod")


async def test_a_second_restart_of_a_synced_idle_im_is_a_violation(
    sandbox: Sandbox, observer: ImObserver
) -> None:
    [im, *_] = await observer.managers()
    name = im["metadata"]["name"]
    await _delete_running_pod(sandbox, observer, name)
    assert observer.violations == []
    await _delete_running_pod(sandbox, observer, name)
    assert [v for v in observer.violations if "2 times in one idle period" in v], observer.violations


async def test_restarting_a_pod_that_lags_the_settings_is_no_violation(
    sandbox: Sandbox, observer: ImObserver
) -> None:
    [im, *_] = await observer.managers()
    name = im["metadata"]["name"]
    await _delete_running_pod(sandbox, observer, name)
    # Written behind the observer's back: the running pod now lags a setting it was told nothing of.
    await sandbox.set_setting("instance-manager-pod-liveness-probe-timeout", "20")
    await _delete_running_pod(sandbox, observer, name)
    assert observer.violations == []
