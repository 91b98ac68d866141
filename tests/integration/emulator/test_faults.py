"""Injected faults, switched at run time in-process and over HTTP, as clients experience them."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from corral_sandbox.emulator import Emulator, EmulatorControl
from tests.integration.emulator.support import LH, NS, collect, create_volume, crs, patch_volume


@pytest.mark.parametrize(
    ("knob", "code", "reason"),
    [
        ("conflict_rate", 409, "Conflict"),
        ("throttle_rate", 429, "TooManyRequests"),
        ("error_rate", 500, "InternalError"),
    ],
)
async def test_write_faults(
    kube_api: client.ApiClient, emulator: Emulator, knob: str, code: int, reason: str
) -> None:
    """kube-apiserver under stress: writes refused with 409 Conflict, 429 TooManyRequests (with
    Retry-After) or 500 InternalError, and nothing stored; reads are unaffected."""
    await create_volume(kube_api, "v")
    setattr(emulator.faults, knob, 1.0)
    before = emulator.resource_version
    with pytest.raises(ApiException) as raised:
        await patch_volume(kube_api, "v", {"spec": {"size": "1"}})
    assert raised.value.status == code and reason in str(raised.value.body)
    if code == 429:
        assert raised.value.headers is not None and raised.value.headers["Retry-After"] == "1"
    assert emulator.resource_version == before
    await crs(kube_api).get_namespaced_custom_object(*LH, NS, "volumes", "v")
    emulator.faults.reset()
    await patch_volume(kube_api, "v", {"spec": {"size": "1"}})


async def test_conflicts_never_turn_a_create_into_another_fault(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """A create cannot conflict, so the conflict share of the roll is not handed on to 429/500: with
    every update conflicting and no throttling, every create still goes through."""
    emulator.faults.update({"conflict_rate": 1.0, "seed": 7})
    for i in range(20):
        await create_volume(kube_api, f"v{i}")
    with pytest.raises(ApiException) as raised:
        await patch_volume(kube_api, "v0", {"spec": {"size": "1"}})
    assert raised.value.status == 409
    emulator.faults.update({"conflict_rate": 0.5, "throttle_rate": 0.25})
    codes = []
    for i in range(200):
        try:
            await create_volume(kube_api, f"w{i}")
            codes.append(201)
        except ApiException as error:
            codes.append(error.status)
    assert set(codes) == {201, 429}
    # creates see only the throttle band: about a quarter of them, not three quarters
    assert 20 <= codes.count(429) <= 80, codes.count(429)


async def test_faults_apply_only_to_chosen_resources(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """Sandbox knob: `plurals` limits write faults to some resource types."""
    emulator.faults.update({"error_rate": 1.0, "plurals": ["engines"]})
    await create_volume(kube_api, "v")


async def test_latency(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """A slow apiserver: every request takes at least the injected latency."""
    emulator.faults.latency_s = 0.2
    loop = asyncio.get_running_loop()
    started = loop.time()
    await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes")
    assert loop.time() - started >= 0.2


async def test_watch_cut_after_n_events(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """An apiserver or load balancer ending a watch: the stream closes after N events, so a client must
    resume from its last resourceVersion (kubernetes-asyncio reconnects when no timeout is given)."""
    listed = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes")
    for i in range(5):
        await create_volume(kube_api, f"v{i}")
    emulator.faults.watch_cut_after_events = 2
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=30,
        until=lambda ev: False,
    )
    assert [e["raw_object"]["metadata"]["name"] for e in events] == ["v0", "v1"]
    resumed = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=events[-1]["raw_object"]["metadata"]["resourceVersion"],
        until=lambda ev: len(ev) >= 3,
    )
    assert [e["raw_object"]["metadata"]["name"] for e in resumed] == ["v2", "v3", "v4"]


async def test_watch_cut_after_seconds(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """A watch ended by the server after T seconds even though the client asked for longer."""
    emulator.faults.watch_cut_after_s = 0.3
    loop = asyncio.get_running_loop()
    started = loop.time()
    await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        timeout_seconds=30,
        until=lambda ev: False,
        deadline_s=5,
    )
    assert loop.time() - started < 5


async def test_silently_dropped_watch_sends_nothing_more(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """A half-dead connection: after the cut the stream stays open but no event (and no bookmark) arrives."""
    emulator.faults.update({"watch_cut_after_events": 1, "watch_drop_silently": True})
    await create_volume(kube_api, "a")
    task = asyncio.create_task(
        collect(
            crs(kube_api).list_namespaced_custom_object,
            *LH,
            NS,
            "volumes",
            resource_version="0",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            until=lambda ev: False,
            deadline_s=10,
        )
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    await create_volume(kube_api, "b")
    assert [e["type"] for e in await task] == ["ADDED"]
    assert loop.time() - started >= 0.8  # held open until the client's own timeout, not closed


async def test_faults_over_http_control(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """Another process changes faults, compacts and reads the write log through /_sandbox."""
    control = EmulatorControl(emulator.url)
    try:
        await control.set_faults(throttle_rate=1.0, retry_after_s=3)
        assert emulator.faults.throttle_rate == 1.0
        with pytest.raises(ApiException) as raised:
            await create_volume(kube_api, "v")
        assert raised.value.status == 429
        assert raised.value.headers is not None and raised.value.headers["Retry-After"] == "3"
        await control.reset_faults()
        created = await create_volume(kube_api, "v")
        assert await control.compact() == emulator.resource_version
        with pytest.raises(ApiException) as gone:
            await collect(
                crs(kube_api).list_namespaced_custom_object,
                *LH,
                NS,
                "volumes",
                resource_version=str(int(created["metadata"]["resourceVersion"]) - 1),
                timeout_seconds=5,
                until=lambda ev: False,
            )
        assert gone.value.status == 410
        writes = await control.writes(plural="volumes")
        assert [(w.verb, w.name) for w in writes] == [("create", "v")]
        with pytest.raises(RuntimeError):
            await control.set_faults(no_such_knob=1)
        with pytest.raises(RuntimeError):
            await control.set_faults(latency_s="slow")
        assert emulator.faults.latency_s == 0
        stats = await control.stats()
        assert stats["objects"]["longhorn.io/volumes"] == 1
    finally:
        await control.close()
