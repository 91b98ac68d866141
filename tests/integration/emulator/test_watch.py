"""Watch semantics, checked through kubernetes-asyncio's Watch exactly as the watcher service uses it."""

from __future__ import annotations

import asyncio
import random

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from corral_sandbox.emulator import Emulator
from tests.integration.emulator.support import LH, NS, collect, create_volume, crs, patch_volume, rvs, summary


async def test_list_then_watch_sees_every_change_once_in_order(kube_api: client.ApiClient) -> None:
    """kube-apiserver: a watch from a list's resourceVersion delivers every later change exactly once,
    in resourceVersion order (the list+watch contract informers rely on)."""
    await create_volume(kube_api, "before")
    listed = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes")
    list_rv = listed["metadata"]["resourceVersion"]
    assert [i["metadata"]["name"] for i in listed["items"]] == ["before"]

    await create_volume(kube_api, "a")
    for i in range(5):
        await patch_volume(kube_api, "a", {"spec": {"size": str(i)}})
    await crs(kube_api).delete_namespaced_custom_object(*LH, NS, "volumes", "before")

    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=list_rv,
        until=lambda ev: len(ev) >= 7,
    )
    assert summary(events) == [("ADDED", "a")] + [("MODIFIED", "a")] * 5 + [("DELETED", "before")]
    seen = rvs(events)
    assert seen == sorted(set(seen)) and seen[0] > int(list_rv)
    assert events[5]["raw_object"]["spec"]["size"] == "4"


async def test_watch_resumes_from_a_resource_version(kube_api: client.ApiClient) -> None:
    """kube-apiserver: watching from resourceVersion R replays exactly the changes after R."""
    created = await create_volume(kube_api, "v")
    first = await patch_volume(kube_api, "v", {"spec": {"size": "1"}})
    await patch_volume(kube_api, "v", {"spec": {"size": "2"}})
    await patch_volume(kube_api, "v", {"spec": {"size": "3"}})

    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=first["metadata"]["resourceVersion"],
        until=lambda ev: len(ev) >= 2,
    )
    assert [e["raw_object"]["spec"]["size"] for e in events] == ["2", "3"]
    assert (
        int(created["metadata"]["resourceVersion"])
        < int(first["metadata"]["resourceVersion"])
        < rvs(events)[0]
    )


async def test_watch_without_resource_version_starts_with_current_state(kube_api: client.ApiClient) -> None:
    """kube-apiserver: a watch with resourceVersion unset or "0" first sends a synthetic ADDED per object."""
    for name in ("x", "y"):
        await create_volume(kube_api, name)
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version="0",
        until=lambda ev: len(ev) >= 2,
    )
    assert summary(events) == [("ADDED", "x"), ("ADDED", "y")]


async def test_watch_from_a_compacted_resource_version_gets_410(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """kube-apiserver: a watch from a resourceVersion older than the watch cache window is answered with an
    ERROR event carrying a Status with code 410 / reason Expired ("too old resource version")."""
    created = await create_volume(kube_api, "v")
    await patch_volume(kube_api, "v", {"spec": {"size": "1"}})
    emulator.compact()
    with pytest.raises(ApiException) as raised:
        await collect(
            crs(kube_api).list_namespaced_custom_object,
            *LH,
            NS,
            "volumes",
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=5,
            until=lambda ev: False,
        )
    assert raised.value.status == 410
    assert "Expired" in str(raised.value.reason) and "too old resource version" in str(raised.value.reason)


async def test_history_window_is_bounded(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: the watch cache holds a bounded number of events per resource; falling out of it
    means 410 for that resourceVersion while a recent one still works."""
    created = await create_volume(kube_api, "v")
    size = emulator.store.history_size
    for i in range(size + size // 4 + 2):
        emulator.store.patch(
            emulator.store.resource(*LH, "volumes"),  # type: ignore[arg-type]
            NS,
            "v",
            "merge",
            b'{"spec":{"size":"%d"}}' % i,
        )
    with pytest.raises(ApiException) as raised:
        await collect(
            crs(kube_api).list_namespaced_custom_object,
            *LH,
            NS,
            "volumes",
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=5,
            until=lambda ev: False,
        )
    assert raised.value.status == 410
    recent = str(emulator.resource_version - 1)
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=recent,
        until=lambda ev: len(ev) >= 1,
    )
    assert rvs(events) == [emulator.resource_version]


async def test_bookmarks_arrive_soon_and_carry_the_latest_resource_version(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """kube-apiserver: with allowWatchBookmarks a watch receives BOOKMARK events whose object has only
    kind, apiVersion and metadata.resourceVersion, and that resourceVersion may be past this resource's
    last event (it moves the client's resume point forward)."""
    created = await create_volume(kube_api, "v")
    # A write to another resource type moves the global resourceVersion past every volume event.
    await client.CoreV1Api(kube_api).create_namespaced_config_map(
        NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"))
    )
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=created["metadata"]["resourceVersion"],
        allow_watch_bookmarks=True,
        until=lambda ev: any(e["type"] == "BOOKMARK" for e in ev),
        deadline_s=5,
    )
    bookmark = events[-1]
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["raw_object"]["kind"] == "Volume"
    assert int(bookmark["raw_object"]["metadata"]["resourceVersion"]) == emulator.resource_version


async def test_timeout_seconds_ends_the_watch(kube_api: client.ApiClient) -> None:
    """kube-apiserver: timeoutSeconds closes the watch stream cleanly after that long."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        timeout_seconds=1,
        until=lambda ev: False,
        deadline_s=5,
    )
    assert events == []
    assert 0.9 <= loop.time() - started < 4


async def test_label_selector_watch_turns_transitions_into_added_and_deleted(
    kube_api: client.ApiClient,
) -> None:
    """kube-apiserver: a watch with a label selector reports an object that starts matching as ADDED and
    one that stops matching as DELETED."""
    listed = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes")
    await create_volume(kube_api, "v", labels={"tier": "gold"})
    await create_volume(kube_api, "other", labels={"tier": "bronze"})
    await patch_volume(kube_api, "v", {"metadata": {"labels": {"tier": "silver"}}})
    await patch_volume(kube_api, "other", {"metadata": {"labels": {"tier": "gold"}}})
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=listed["metadata"]["resourceVersion"],
        label_selector="tier=gold",
        until=lambda ev: len(ev) >= 3,
    )
    assert summary(events) == [("ADDED", "v"), ("DELETED", "v"), ("ADDED", "other")]


async def test_core_pod_watch_with_field_selector(kube_api: client.ApiClient) -> None:
    """kube-apiserver: pods can be watched by field selector (metadata.name, spec.nodeName) through the
    typed CoreV1Api, which decodes each event into a V1Pod."""
    core = client.CoreV1Api(kube_api)
    listed = await core.list_namespaced_pod(NS)
    for name, node in (("p1", "n1"), ("p2", "n2")):
        await core.create_namespaced_pod(
            NS,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="c", image="i")]),
            ),
        )
    events = await collect(
        core.list_namespaced_pod,
        NS,
        resource_version=listed.metadata.resource_version,
        field_selector="spec.nodeName=n2",
        until=lambda ev: len(ev) >= 1,
    )
    assert isinstance(events[0]["object"], client.V1Pod)
    assert events[0]["object"].metadata.name == "p2"


async def test_send_initial_events_ends_with_a_marked_bookmark(kube_api: client.ApiClient) -> None:
    """kube-apiserver streaming lists (sendInitialEvents=true): the current objects arrive as ADDED, then a
    BOOKMARK annotated `k8s.io/initial-events-end: "true"` at the resourceVersion of that state
    (CoreV1Api, since CustomObjectsApi has no send_initial_events parameter)."""
    core = client.CoreV1Api(kube_api)
    for name in ("x", "y"):
        await core.create_namespaced_config_map(
            NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
        )
    events = await collect(
        core.list_namespaced_config_map,
        NS,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        until=lambda ev: ev[-1]["type"] == "BOOKMARK",
    )
    assert summary(events)[:2] == [("ADDED", "x"), ("ADDED", "y")]
    marker = events[2]["raw_object"]["metadata"]
    assert marker["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(marker["resourceVersion"]) >= rvs(events[:2])[-1]


async def test_exact_list_of_a_past_resource_version_is_410(kube_api: client.ApiClient) -> None:
    """kube-apiserver: resourceVersionMatch=Exact for a snapshot it no longer has is 410 Expired
    (the emulator keeps only the current state, so every past one is gone)."""
    created = await create_volume(kube_api, "v")
    await patch_volume(kube_api, "v", {"spec": {"size": "1"}})
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).list_namespaced_custom_object(
            *LH,
            NS,
            "volumes",
            resource_version=created["metadata"]["resourceVersion"],
            resource_version_match="Exact",
        )
    assert raised.value.status == 410
    current = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes")
    again = await crs(kube_api).list_namespaced_custom_object(
        *LH,
        NS,
        "volumes",
        resource_version=current["metadata"]["resourceVersion"],
        resource_version_match="Exact",
    )
    assert again["items"] == current["items"]


async def test_concurrent_writers_are_seen_once_each_in_order(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """kube-apiserver: with many clients writing at once, a watch still delivers every committed change
    exactly once, in strictly increasing resourceVersion order, ending in the stored state."""
    names = [f"v{i}" for i in range(8)]
    for name in names:
        await create_volume(kube_api, name)
    listed = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes")

    async def writer(name: str) -> None:
        for i in range(15):
            await patch_volume(kube_api, name, {"spec": {"size": str(i)}})

    watching = asyncio.create_task(
        collect(
            crs(kube_api).list_namespaced_custom_object,
            *LH,
            NS,
            "volumes",
            resource_version=listed["metadata"]["resourceVersion"],
            until=lambda ev: len(ev) >= 8 * 15,
            deadline_s=30,
        )
    )
    await asyncio.gather(*(writer(n) for n in names))
    events = await watching
    seen = rvs(events)
    assert len(seen) == 8 * 15 and seen == sorted(set(seen))
    committed = [r.resource_version for r in emulator.write_log.records(verb="patch", plural="volumes")]
    assert seen == committed
    last = {e["raw_object"]["metadata"]["name"]: e["raw_object"]["spec"]["size"] for e in events}
    assert last == {n: "14" for n in names}


async def test_a_selector_watch_rebuilds_exactly_the_selected_state(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """The informer contract with selectors: applying a label-selector watch's events (ADDED/MODIFIED
    set, DELETED removes) to the list it started from yields exactly what a fresh list with that selector
    returns, whatever mix of creates, relabels, spec changes and deletes happened meanwhile."""
    rng = random.Random(11)
    selector = "tier in (gold,silver),!frozen"
    listed = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes", label_selector=selector)
    state = {o["metadata"]["name"]: o for o in listed["items"]}
    live: set[str] = set()
    for step in range(120):
        name = f"v{rng.randrange(12)}"
        labels = {"tier": rng.choice(["gold", "silver", "bronze"])}
        if rng.random() < 0.2:
            labels["frozen"] = "yes"
        if name not in live:
            await create_volume(kube_api, name, labels=labels)
            live.add(name)
        elif rng.random() < 0.2:
            await crs(kube_api).delete_namespaced_custom_object(*LH, NS, "volumes", name)
            live.discard(name)
        elif rng.random() < 0.5:
            await patch_volume(
                kube_api, name, {"metadata": {"labels": {**labels, "frozen": labels.get("frozen")}}}
            )
        else:
            await patch_volume(kube_api, name, {"spec": {"size": str(step)}})
    expected = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes", label_selector=selector)
    target = int(expected["metadata"]["resourceVersion"])
    events = await collect(
        crs(kube_api).list_namespaced_custom_object,
        *LH,
        NS,
        "volumes",
        resource_version=listed["metadata"]["resourceVersion"],
        label_selector=selector,
        allow_watch_bookmarks=True,
        until=lambda ev: ev[-1]["type"] == "BOOKMARK" and rvs(ev[-1:])[0] >= target,
    )
    for event in events[:-1]:
        obj = event["raw_object"]
        if event["type"] == "DELETED":
            del state[obj["metadata"]["name"]]
        elif event["type"] != "BOOKMARK":
            state[obj["metadata"]["name"]] = obj
    assert state == {o["metadata"]["name"]: o for o in expected["items"]}
    assert emulator.resource_version == target
    assert expected["items"] and {"ADDED", "MODIFIED", "DELETED"} <= {e["type"] for e in events}
