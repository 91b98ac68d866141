"""IM-04, 05, 07, 08 and 14 (acceptance-scenarios.md §4.3): failed, missing, disabled, superseded and
crashed instance managers, through the whole stack, with both invariants judged at every IM pod
delete (scenario.py). The default three-node sandbox."""

from __future__ import annotations

import pytest

from corral_sandbox.simulator.im_ledger import instance_manager_pods
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.im_restart.conftest import im_restart
from tests.scenarios.im_restart.scenario import ImObserver
from tests.scenarios.im_restart.test_im import WINDOW_S, attach, detach, restarted, wait_attached

pytestmark = pytest.mark.scenario

NEW_IM_IMAGE = "longhornio/longhorn-instance-manager:v1.11.0"


async def _recreated_once(sandbox: Sandbox, name: str) -> bool:
    """The simulator's ledger (every pod uid it ran for the IM) shows exactly one replacement."""
    ledger = instance_manager_pods(sandbox.simulator.view, sandbox.simulator.memory)
    return bool(next(e["recreations"] for e in ledger if e["name"] == name) == 1)


# --- IM-04 -------------------------------------------------------------------------------------------


async def test_im_04_a_failed_im_pod_is_deleted_though_its_settings_are_synced(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    """The simulated IM controller leaves failed pods alone here: only corral can delete it."""
    im = await observer.manager("node-1")
    name = im["metadata"]["name"]
    uid = await observer.pod_uid(name)
    sandbox.simulator.faults.fail_instance_manager_pod(name)
    await restarted(sandbox, observer, {name: uid})
    assert observer.deletes[name] == 1 and observer.deleted_uids[name] == [uid]
    await sandbox.wait_for(lambda: _recreated_once(sandbox, name), within=5, what="one pod made after")
    others = {n: await observer.pod_uid(n) for n in observer.deletes.keys() - {name}}
    assert others == {}, "no other IM was touched"


# --- IM-05 -------------------------------------------------------------------------------------------


async def test_im_05_a_missing_pod_on_a_cordoned_node_is_not_recreated_until_uncordoned(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver, nats_server: NatsServer
) -> None:
    """Pod creation is Longhorn's IM controller's (the simulator): corral neither creates one nor
    deletes anything while the pod is missing, and a second im-restart replica changes nothing."""
    standby = im_restart(nats_server.url, "imr-2")
    try:
        await eventually(lambda: standby.ctx is not None, within=60, what="the second replica")
        im = await observer.manager("node-1")
        name = im["metadata"]["name"]
        await sandbox.core.patch_node("node-1", {"spec": {"unschedulable": True}})
        observer.crash(name)
        await sandbox.core.delete_namespaced_pod(name, sandbox.namespace)

        async def unschedulable() -> bool:
            current = await sandbox.get("instancemanagers", name)
            conditions = current.get("status", {}).get("conditions") or []
            node_ready: dict[str, str] = next((c for c in conditions if c["type"] == "NodeReady"), {})
            return node_ready.get("reason") == "Unschedulable" and node_ready.get("status") == "False"

        await sandbox.wait_for(unschedulable, within=20, what="NodeReady False/Unschedulable")

        async def still_missing() -> bool:
            await observer.holds()
            return await observer.pod(name) is None

        await sandbox.stays(still_missing, WINDOW_S, what="no pod on the cordoned node")
        await sandbox.core.patch_node("node-1", {"spec": {"unschedulable": None}})
        await sandbox.wait_for(
            lambda: observer.running_pod(name), within=20, what="the pod recreated", invariant=observer.holds
        )
        assert observer.deletes[name] == 1, "only the test's own delete"
        await sandbox.wait_for(lambda: _recreated_once(sandbox, name), within=5, what="one pod made after")
    finally:
        await standby.stop()


# --- IM-07 -------------------------------------------------------------------------------------------


async def test_im_07_v1_disabled_then_enabled(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    await observer.set_setting("v1-data-engine", "false")

    async def count(n: int) -> bool:
        managers = await observer.managers()
        return len(managers) == n and all(
            im.get("status", {}).get("currentState") == "running" for im in managers
        )

    await sandbox.wait_for(lambda: count(0), within=20, what="no v1 IM", invariant=observer.holds)
    await observer.set_setting("v1-data-engine", "true")
    await sandbox.wait_for(
        lambda: count(3), within=20, what="one running v1 IM per node", invariant=observer.holds
    )
    for im in await observer.managers():
        assert await observer.running_pod(im["metadata"]["name"]) is not None


# --- IM-08 -------------------------------------------------------------------------------------------


async def test_im_08_a_new_im_image_keeps_busy_old_ims_until_their_last_instance_stops(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    await attach(sandbox, "vol-a", "node-1")
    await wait_attached(sandbox, "vol-a", observer)
    old = await observer.manager("node-1")
    old_name = old["metadata"]["name"]
    old_uid = await observer.pod_uid(old_name)
    await sandbox.set_setting("default-instance-manager-image", NEW_IM_IMAGE)  # the manager's write

    async def new_generation() -> bool:
        managers = await observer.managers()
        new = [im for im in managers if im["spec"]["image"] == NEW_IM_IMAGE]
        running = all(im.get("status", {}).get("currentState") == "running" for im in new)
        return len(new) == 3 and running and len(managers) == 4

    await sandbox.wait_for(
        new_generation, within=20, what="3 new IMs beside the busy old one", invariant=observer.holds
    )

    async def old_kept() -> bool:
        await observer.holds()
        pod = await observer.pod(old_name)
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        return bool(pod and pod["metadata"]["uid"] == old_uid and statuses[0].get("restartCount", 0) == 0)

    await sandbox.stays(old_kept, WINDOW_S, what="the busy old IM keeps its pod, restart count 0")
    await detach(sandbox, "vol-a")

    async def old_gone() -> bool:
        return await sandbox.find("instancemanagers", old_name) is None

    await sandbox.wait_for(old_gone, within=20, what="the old IM removed once idle", invariant=observer.holds)


# --- IM-14 -------------------------------------------------------------------------------------------


async def test_im_14_a_crashed_im_is_recovered_by_longhorn_not_restarted_again_by_corral(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    await attach(sandbox, "vol-c", "node-1", replicas=3)
    await sandbox.wait_volume(
        "vol-c", lambda v: v.get("status", {}).get("robustness") == "healthy", within=20, what="healthy"
    )
    name = (await observer.manager("node-1"))["metadata"]["name"]
    observer.crash(name)
    async with sandbox.recording("volumes", "vol-c") as seen:
        await sandbox.core.delete_namespaced_pod(name, sandbox.namespace)
        await sandbox.wait_recorded(
            seen,
            lambda v: (
                v.get("status", {}).get("state") == "attached"
                and v.get("status", {}).get("robustness") == "healthy"
                and bool(v.get("status", {}).get("remountRequestedAt"))
            ),
            within=20,
            what="detached by the crash, then attached and healthy again",
        )
    assert "detached" in [v.get("status", {}).get("state") for v in seen]
    counts = dict(observer.deletes)
    assert counts == {name: 1}, "only the crash"

    async def no_more() -> bool:
        await observer.holds()
        return dict(observer.deletes) == counts

    await sandbox.stays(no_more, WINDOW_S, what="corral does not read the crash as a restart to make")
