"""The IM scenarios of acceptance-scenarios.md §4.3, in the sandbox, through the whole stack:
watcher → LH_OBJECTS → im-restart → LH_COMMANDS → actuator → the emulator, whose instance managers
the simulator (Longhorn's IM controller and the kubelet) carries on. Both invariants (scenario.py)
are judged at every IM pod delete, inside the API server, and checked at every observation.

Simulated durations are hundredths of a second, so a "never within the window" is a second or two:
many times the stack's reaction time (an idle IM with unsynced settings is restarted well within it).
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from corral_bus import Bus
from corral_cli.progress.follow import follow_wave, summary
from corral_cli.progress.render import LineView
from corral_sandbox.simulator import objects
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.im_restart.scenario import ImObserver, busy_instances, setting_synced, tolerations

pytestmark = pytest.mark.scenario

NODES = ("node-1", "node-2", "node-3")
WINDOW_S = 1.5


async def attach(sandbox: Sandbox, name: str, node: str, replicas: int = 1) -> None:
    await sandbox.create_volume(name, replicas=replicas, node=node)


async def wait_attached(sandbox: Sandbox, name: str, observer: ImObserver) -> None:
    await sandbox.wait_volume(
        name,
        lambda v: v.get("status", {}).get("state") == "attached",
        within=20,
        what=f"{name} attached",
        invariant=observer.holds,
    )


async def detach(sandbox: Sandbox, name: str) -> None:
    await sandbox.patch("volumes", name, {"spec": {"nodeID": ""}})


async def restarted(
    sandbox: Sandbox, observer: ImObserver, names: dict[str, str], within: float = 20
) -> dict[str, dict[str, Any]]:
    """Wait until every IM in `names` (IM → its old pod uid) runs on a new pod."""

    async def all_new() -> dict[str, dict[str, Any]] | None:
        pods = {name: await observer.running_pod(name, not_uid=uid) for name, uid in names.items()}
        return {n: p for n, p in pods.items() if p is not None} if all(pods.values()) else None

    return await sandbox.wait_for(
        all_new, within=within, interval=0.02, what=f"{sorted(names)} on new pods", invariant=observer.holds
    )


async def uids(observer: ImObserver) -> dict[str, str]:
    return {
        im["metadata"]["name"]: await observer.pod_uid(im["metadata"]["name"])
        for im in await observer.managers()
    }


async def condition_is(sandbox: Sandbox, name: str, status: str, text: str = "") -> dict[str, Any] | None:
    held = setting_synced(await sandbox.get("instancemanagers", name))
    return held if held and held["status"] == status and text in held.get("message", "") else None


# --- IM-01 -------------------------------------------------------------------------------------------


async def test_im_01_an_idle_im_is_restarted_with_the_new_settings(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    """Each setting written is a new reason to restart (the IMs are idle all along, so one write may
    already be applied before the next): the pods end up built from all of them, each IM restarted
    at most once per write, and SettingSynced went False, then True again."""
    await sandbox.create_priority_class("longhorn-critical")
    before = await uids(observer)
    some = next(iter(before))
    await sandbox.wait_for(lambda: condition_is(sandbox, some, "True"), within=20, what="SettingSynced True")
    async with sandbox.recording("instancemanagers", some) as seen:
        for name, value in {
            "taint-toleration": "key1=value1:NoSchedule",
            "priority-class": "longhorn-critical",
            "guaranteed-instance-manager-cpu": '{"v1":"25","v2":"12"}',
            "storage-network": "kube-system/storage",
            "instance-manager-pod-liveness-probe-timeout": "20",
        }.items():
            await observer.set_setting(name, value)

        async def all_applied() -> dict[str, dict[str, Any]] | None:
            pods = {name: await observer.running_pod(name, not_uid=uid) for name, uid in before.items()}
            done = all(
                p is not None and p["spec"]["containers"][0]["livenessProbe"]["timeoutSeconds"] == 20
                for p in pods.values()
            )
            return {n: p for n, p in pods.items() if p is not None} if done else None

        pods = await sandbox.wait_for(
            all_applied, within=20, what="every IM on a pod with all the settings", invariant=observer.holds
        )
        await sandbox.wait_for(lambda: condition_is(sandbox, some, "True"), within=20, what="synced again")
        await sandbox.wait_recorded(seen, lambda im: (setting_synced(im) or {}).get("status") == "True")
    statuses = [(setting_synced(im) or {}).get("status") for im in seen]
    assert "False" in statuses and statuses[-1] == "True"
    for pod in pods.values():
        container = pod["spec"]["containers"][0]
        assert pod["spec"]["priorityClassName"] == "longhorn-critical"
        assert tolerations(pod) == [
            {"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"}
        ]
        assert container["resources"]["requests"]["cpu"] == "1"  # 25 % of 4 CPUs
        assert "kube-system" in pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
    counts = dict(observer.deletes)
    await sandbox.stays(
        lambda: _no_more_deletes(observer, counts), WINDOW_S, what="no restart once the pods are synced"
    )


BURST = {
    "taint-toleration": "key1=value1:NoSchedule",
    "priority-class": "longhorn-critical",
    "storage-network": "kube-system/storage",
    "guaranteed-instance-manager-cpu": '{"v1":"25","v2":"12"}',
    "instance-manager-pod-liveness-probe-timeout": "20",
}
BURST_GAP_S = 0.5
# The settle the burst runs under: its writes are half a second apart, but on a loaded 2-core CI
# machine one write and the half-second check after it took over the 2 s default; the rule under
# test (a burst within the settle restarts an IM once) is the same at any settle.
BURST_SETTLE_S = 5.0


@pytest.mark.parametrize("im_restart_settings", [{"settings_settle_s": BURST_SETTLE_S}], indirect=True)
async def test_im_01b_settings_half_a_second_apart_restart_each_idle_im_once(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    """Issue 24: five danger-zone settings written half a second apart restarted an idle IM five
    times. The IMs settle until the settings are quiet, then each is restarted once, on a pod built
    from all of them."""
    await sandbox.create_priority_class("longhorn-critical")
    before = await uids(observer)
    assert before
    for name, value in BURST.items():
        await observer.set_setting(name, value)
        await sandbox.stays(
            lambda: _no_more_deletes(observer, {}), BURST_GAP_S, what="no IM restarted during the burst"
        )

    async def all_applied() -> dict[str, dict[str, Any]] | None:
        pods = {name: await observer.running_pod(name, not_uid=uid) for name, uid in before.items()}
        done = all(
            p is not None and p["spec"]["containers"][0]["livenessProbe"]["timeoutSeconds"] == 20
            for p in pods.values()
        )
        return {n: p for n, p in pods.items() if p is not None} if done else None

    pods = await sandbox.wait_for(
        all_applied, within=20, what="every IM on a pod with all the settings", invariant=observer.holds
    )
    for pod in pods.values():
        assert pod["spec"]["priorityClassName"] == "longhorn-critical"
    assert dict(observer.deletes) == dict.fromkeys(before, 1), "one restart per IM"
    counts = dict(observer.deletes)
    await sandbox.stays(lambda: _no_more_deletes(observer, counts), WINDOW_S, what="and no more")


async def _no_more_deletes(observer: ImObserver, counts: dict[str, int]) -> bool:
    await observer.holds()
    return dict(observer.deletes) == counts


# --- IM-02 -------------------------------------------------------------------------------------------


async def test_im_02_a_busy_im_is_never_restarted_and_is_restarted_once_idle(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver, bus: Bus
) -> None:
    held = objects.engine_name("vol-starting")
    sandbox.simulator.faults.hold_instance(held)
    await attach(sandbox, "vol-running", "node-1")
    await attach(sandbox, "vol-starting", "node-2")
    await wait_attached(sandbox, "vol-running", observer)
    on_one, on_two = await observer.manager("node-1"), await observer.manager("node-2")

    async def starting_on_two() -> bool:
        im = await sandbox.get("instancemanagers", on_two["metadata"]["name"])
        return held in busy_instances(im)

    await sandbox.wait_for(starting_on_two, within=20, what="the held engine starting on node-2's IM")
    busy = {im["metadata"]["name"] for im in (on_one, on_two)}
    await sandbox.create_priority_class("longhorn-critical")
    before = await uids(observer)
    await observer.set_setting("priority-class", "longhorn-critical")
    idle = {
        name: uid
        for name, uid in before.items()
        if name not in busy and not busy_instances(await sandbox.get("instancemanagers", name))
    }
    await restarted(sandbox, observer, idle)

    async def busy_untouched() -> bool:
        return all([await observer.pod_uid(name) == before[name] for name in busy])

    for name in busy:
        await sandbox.wait_for(
            lambda name=name: condition_is(
                sandbox, name, "False", "Settings [priority-class] are not synced"
            ),  # type: ignore[misc]
            within=20,
            what=f"{name}: SettingSynced False, naming the setting",
            invariant=observer.holds,
        )
    await sandbox.stays(busy_untouched, WINDOW_S, what="busy IMs keep their pods")

    # What `corral progress im-restart` shows an operator now, read from the bus alone.
    out = io.StringIO()
    report = await follow_wave(bus, LineView(out), service_name="im-restart", interval=0.02)
    assert report.finished and report.total.blocked == {"busy": 2}
    shown = out.getvalue()
    [line] = [line for line in shown.splitlines() if f"busy: {held}" in line or f" {held}," in line]
    assert "blocked: busy" in line and "unsynced: priority-class  since " in line
    assert "node-1" in shown and "blocked 1 (busy 1)" in shown
    assert summary(report).startswith("im-restart done in")

    sandbox.simulator.faults.release_instance(held)  # starting → running: still busy
    await wait_attached(sandbox, "vol-starting", observer)
    await sandbox.stays(busy_untouched, 0.5, what="busy IMs keep their pods")
    await detach(sandbox, "vol-running")
    await detach(sandbox, "vol-starting")
    await restarted(sandbox, observer, {name: before[name] for name in busy})
    for name in busy:
        await sandbox.wait_for(lambda name=name: condition_is(sandbox, name, "True"), within=20)  # type: ignore[misc]
        assert observer.deletes[name] == 1
