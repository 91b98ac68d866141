"""DZ-10 and DZ-11 (acceptance-scenarios.md §3.3): the guaranteed instance-manager CPU (instance
managers restart only once idle; the per-node override) and the data-engine toggle (refused while
engine instances run). Invariants of scenario.py at every observation."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client

from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.setting_sync.scenario import NODES, Observer
from tests.scenarios.setting_sync.volumes import attached, detach, state

pytestmark = pytest.mark.scenario
CPU = "guaranteed-instance-manager-cpu"
V1 = "v1-data-engine"


async def settled(sandbox: Sandbox) -> Observer:
    observer = Observer(sandbox)
    await observer.until(
        lambda: observer.rolled_out() and observer.im_pods_running(), what="a settled cluster"
    )
    return observer


def cpu_requests(observer: Observer) -> dict[str, str]:
    """IM pod name → its CPU request ("" for none)."""
    return {
        name: str(
            ((pod["spec"]["containers"][0].get("resources") or {}).get("requests") or {}).get("cpu", "")
        )
        for name, pod in observer.im_pods().items()
    }


def uids(observer: Observer) -> dict[str, str]:
    return {name: pod["metadata"]["uid"] for name, pod in observer.im_pods().items()}


def node_of(observer: Observer, im: str) -> str:
    return str(observer.im_pods()[im]["spec"]["nodeName"])


def busy(observer: Observer) -> set[str]:
    return {
        im["metadata"]["name"]
        for im in observer.objects("longhorn.io", "instancemanagers")
        if (im.get("status") or {}).get("instanceEngines") or (im.get("status") or {}).get("instanceReplicas")
    }


async def refused(sandbox: Sandbox, name: str, value: str) -> str:
    with pytest.raises(client.ApiException) as answer:
        await sandbox.patch("settings", name, {"value": value})
    assert answer.value.status == 400
    return str(json.loads(str(answer.value.body))["message"])


async def cpu_waits_for_idle(sandbox: Sandbox) -> tuple[Observer, set[str]]:
    observer = await settled(sandbox)
    assert set(cpu_requests(observer).values()) == {"480m"}, "12 % of 4 CPUs"
    await attached(sandbox, "vol-1")
    held = busy(observer)
    before = uids(observer)
    await observer.set_setting(CPU, '{"v1":"20","v2":"12"}')

    def idle_restarted() -> bool:
        now, requests = uids(observer), cpu_requests(observer)
        return observer.im_pods_running() and all(
            (requests[n] == "800m" and now[n] != before[n]) if n not in held else requests[n] == "480m"
            for n in before
        )

    await observer.until(idle_restarted, what="idle IMs at 800m, the busy one still at 480m")
    await observer.holds(
        lambda: all(uids(observer)[n] == before[n] for n in held), 0.5, what="the busy IM pod kept"
    )
    return observer, held


async def test_dz_10_guaranteed_cpu_restarts_only_idle_instance_managers(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer, held = await cpu_waits_for_idle(sandbox)
    message = await refused(sandbox, CPU, "41")
    assert "should be less than or equal to 40" in message
    await detach(sandbox, "vol-1")
    await observer.until(
        lambda: observer.im_pods_running() and set(cpu_requests(observer).values()) == {"800m"},
        what="every IM at 800m once idle",
    )
    # the per-node override: node-1 alone, 150m; 0 means the global value again
    before = uids(observer)
    await sandbox.patch("nodes", "node-1", {"spec": {"instanceManagerCPURequest": 150}})

    def node_1_at(request: str) -> bool:
        requests = cpu_requests(observer)
        return observer.im_pods_running() and all(
            requests[n] == (request if node_of(observer, n) == "node-1" else "800m") for n in requests
        )

    await observer.until(lambda: node_1_at("150m"), what="node-1's IM at 150m")
    now = uids(observer)
    assert [n for n in before if now.get(n) != before[n]] == [
        n for n in before if node_of(observer, n) == "node-1"
    ], "only node-1's IM restarted"
    await sandbox.patch("nodes", "node-1", {"spec": {"instanceManagerCPURequest": 0}})
    await observer.until(lambda: node_1_at("800m"), what="node-1's IM back at 800m")
    # a change to the v2 part only leaves the v1 instance managers alone
    before = uids(observer)
    await observer.set_setting(CPU, '{"v1":"20","v2":"30"}')
    await observer.holds(lambda: uids(observer) == before, 1.0, what="no v1 IM restarted")
    assert len(before) == len(NODES) and held


async def test_dz_10_applied_follows_the_engine_instances(sandbox: Sandbox, stack: list[Running]) -> None:
    observer, _ = await cpu_waits_for_idle(sandbox)
    await observer.until(lambda: not observer.applied(CPU), within=3, what="applied=false while engines run")
    await detach(sandbox, "vol-1")
    await observer.until(
        lambda: observer.applied(CPU) and set(cpu_requests(observer).values()) == {"800m"},
        within=10,
        what="applied=true once every IM carries the request",
    )


async def test_dz_11_data_engine_toggle(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    await attached(sandbox, "vol-1")
    await observer.until(lambda: bool(busy(observer)), what="the engine running in its IM")
    message = await refused(sandbox, V1, "false")
    assert (
        "cannot apply v1-data-engine setting to Longhorn workloads when there are attached v1 volumes"
        in message
    )
    await detach(sandbox, "vol-1")
    await observer.until(lambda: not busy(observer), what="no engine instance left")
    await observer.set_setting(V1, "false")
    await observer.until(
        lambda: not observer.objects("longhorn.io", "instancemanagers") and not observer.im_pods(),
        what="no instance manager left",
    )
    await sandbox.patch("volumes", "vol-1", {"spec": {"nodeID": "node-1"}})

    def not_attached() -> bool:
        volume = observer.get("longhorn.io", "volumes", "vol-1") or {}
        return state(volume) != "attached"

    await observer.holds(not_attached, 1.0, what="an attach request stays unattached while v1 is off")
    await observer.set_setting(V1, "true")
    await observer.until(observer.im_pods_running, what="an instance manager per node again")
    await sandbox.wait_volume(
        "vol-1", lambda v: state(v) == "attached", within=30, what="the volume attached once v1 is back"
    )
