"""The catalogue: what a real cluster does at any moment, each as `inject(world) -> clear`.

A fault reads what it acts on from `world.target`, which the state trap filled: `node` (the node
the service acts on), `volume` (a volume the decision is about), `attached` / `detached` (an
attached and a detached volume of that node, other than the target), `pod` (an instance-manager
pod on the node). A service's own meaning of a fault (its target deleted or changed, its setting
changed again) comes from its spec. Everything goes through the API server or the sandbox's
control surface, as an operator, a kubelet or Longhorn would do it; nothing reaches into a
service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client import ApiException
from nats.js.api import ConsumerConfig, DeliverPolicy

from corral_model.subjects import OBJECTS_STREAM
from corral_sandbox.simulator import objects as lh_objects
from tests.explore.model import NotExpressible
from tests.explore.world import World
from tests.fixtures.sandbox import WaitTimeout

STARTING = "explore-new"
"""The volume whose engine an instance-starting fault holds in `starting`."""

Clear = Callable[[], Awaitable[None]]
Inject = Callable[[World], Awaitable[Clear]]


async def nothing_to_clear() -> None:
    """The Clear of a fault that leaves nothing to undo."""
    return None


def _need(world: World, key: str) -> str:
    value = world.target.get(key, "")
    if not value:
        raise NotExpressible(f"this world has no {key} to act on in this state")
    return value


# --- the service's own objects (its spec decides what they are) ---------------------------------------


async def target_deleted(world: World) -> Clear:
    return await world.spec.delete_target(world)


async def target_changed(world: World) -> Clear:
    return await world.spec.change_target(world)


async def setting_changed(world: World) -> Clear:
    return await world.spec.change_setting(world)


# --- nodes ------------------------------------------------------------------------------------------


async def node_not_ready(world: World) -> Clear:
    node = _need(world, "node")
    world.safety.crashed_nodes.add(node)
    await world.control.set_node_ready(node, False)

    async def clear() -> None:
        await world.control.set_node_ready(node, True)

    return clear


async def _cordon(world: World, node: str, value: bool) -> None:
    await world.sandbox.core.patch_node(
        node,
        {"spec": {"unschedulable": value}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )


async def node_cordoned(world: World) -> Clear:
    node = _need(world, "node")
    await _cordon(world, node, True)

    async def clear() -> None:
        await _cordon(world, node, False)

    return clear


# --- instances and volumes ------------------------------------------------------------------------------


async def instance_starting(world: World) -> Clear:
    """A new volume attaches on the node and its engine stays `starting` until the fault clears."""
    node = _need(world, "node")
    name = STARTING
    body = lh_objects.volume(
        name,
        world.sandbox.namespace,
        image=world.spec.volume_image,
        replicas=1,
        node_id=node,
        data_engine=world.spec.data_engine,
    )
    await world.control.hold_instance(lh_objects.engine_name(name))
    await world.sandbox.create("volumes", body)

    async def clear() -> None:
        await world.control.release_instance(lh_objects.engine_name(name))
        if await world.sandbox.find("volumes", name) is not None:
            await world.sandbox.patch("volumes", name, {"spec": {"nodeID": ""}})

    return clear


async def instance_starting_slow_api(world: World) -> Clear:
    """An instance starts while every API write takes a second: the window between a decision
    and its write landing, widened as a loaded API server widens it."""
    world.sandbox.emulator.faults.update({"write_latency_s": 1.0})
    try:
        release = await instance_starting(world)
    except BaseException:
        world.sandbox.emulator.faults.reset()
        raise

    async def clear() -> None:
        world.sandbox.emulator.faults.reset()
        await release()

    return clear


async def instance_starting_mid_delete(world: World) -> Clear:
    """An instance starts on the node's IM while a delete of that IM's pod is in flight: the API
    server answers the pod writes 429 (the actuator retries after Retry-After), and once a delete of
    the pod was refused the instance starts; the fault clears while it is still starting. The
    window between a decision and its write landing, which a loaded API server widens (issue 24)."""
    pod = _need(world, "pod")
    faults = world.sandbox.emulator.faults
    refused: list[str] = []
    judge = faults.write_fault

    def recording(rt: Any, name: str, *, creating: bool = False) -> Any:
        error = judge(rt, name, creating=creating)
        if error is not None and rt.plural == "pods":
            refused.append(name)
        return error

    faults.write_fault = recording  # type: ignore[method-assign]
    faults.update({"throttle_rate": 1.0, "retry_after_s": 1, "plurals": ["pods"]})

    async def delete_tried() -> bool:
        return pod in refused

    with contextlib.suppress(WaitTimeout):
        await world.sandbox.wait_for(
            delete_tried, within=3.0, interval=0.02, what=f"a write of {pod} refused"
        )
    try:
        release = await instance_starting(world)
    except BaseException:
        faults.write_fault = judge  # type: ignore[method-assign]
        faults.reset()
        raise
    engine = lh_objects.engine_name(STARTING)

    async def starting() -> bool:
        im = world.sandbox.emulator.get("longhorn.io", "instancemanagers", world.sandbox.namespace, pod) or {}
        engines = (im.get("status") or {}).get("instanceEngines") or {}
        return bool((engines.get(engine) or {}).get("status", {}).get("state") == "starting")

    with contextlib.suppress(WaitTimeout):
        await world.sandbox.wait_for(starting, within=3.0, interval=0.02, what=f"{engine} starting in {pod}")
    uid = ((await _pod(world, pod)) or {}).get("metadata", {}).get("uid")

    async def clear() -> None:
        faults.write_fault = judge  # type: ignore[method-assign]
        faults.reset()

        async def landed() -> bool:
            now = await _pod(world, pod)
            return (
                now is None
                or now["metadata"].get("uid") != uid
                or bool(now["metadata"].get("deletionTimestamp"))
            )

        with contextlib.suppress(WaitTimeout):
            await world.sandbox.wait_for(
                landed, within=3.0, interval=0.02, what=f"the delete of {pod} landing"
            )
        await release()

    return clear


async def _pod(world: World, name: str) -> dict[str, Any] | None:
    return world.sandbox.emulator.get("", "pods", world.sandbox.namespace, name)


async def _attach(world: World, volume: str, node: str) -> None:
    await world.sandbox.patch("volumes", volume, {"spec": {"nodeID": node}})


async def _asked_onto(world: World, volume: str) -> str:
    return str((await world.sandbox.get("volumes", volume))["spec"].get("nodeID") or "")


async def instance_stopping(world: World) -> Clear:
    """Another attached volume detaches: its instances stop; it comes back where it was."""
    volume = _need(world, "attached")
    node = await _asked_onto(world, volume)
    world.safety.released.add(volume)
    await _attach(world, volume, "")

    async def clear() -> None:
        await _attach(world, volume, node)

    return clear


async def volume_attached(world: World) -> Clear:
    node, volume = _need(world, "node"), _need(world, "detached")
    await _attach(world, volume, node)

    async def clear() -> None:
        await _attach(world, volume, "")

    return clear


async def volume_detached(world: World) -> Clear:
    volume = _need(world, "volume")
    node = await _asked_onto(world, volume)
    if not node:
        raise NotExpressible(f"the target volume {volume} is detached already in this state")
    world.safety.released.add(volume)
    await _attach(world, volume, "")

    async def clear() -> None:
        await _attach(world, volume, node)

    return clear


async def volume_degraded(world: World) -> Clear:
    volume = _need(world, "volume")
    replicas = sorted(r["metadata"]["name"] for r in await world.sandbox.replicas_of(volume))
    if not replicas:
        raise NotExpressible(f"volume {volume} has no replica to fail")
    await world.control.fail_replica(replicas[0])
    return nothing_to_clear


async def volume_deleted(world: World) -> Clear:
    volume = _need(world, "volume")
    world.safety.released.add(volume)
    await world.sandbox.delete("volumes", volume)
    return nothing_to_clear


async def pod_deleted(world: World) -> Clear:
    """The node's instance-manager pod crashes away (the cell's own delete, not judged)."""
    node, pod = _need(world, "node"), _need(world, "pod")
    await pod_there(world, pod)
    world.safety.expect_delete("pods", pod, node)
    try:
        await world.sandbox.core.delete_namespaced_pod(pod, world.sandbox.namespace)
    except ApiException as error:
        if error.status != 404:
            raise
        # gone between the look and the delete (the state's own delete, setting-sync applying)
        raise NotExpressible(f"pod {pod} is already gone in this state (no pod to act on)") from error
    return nothing_to_clear


async def pod_there(world: World, pod: str) -> None:
    """A fault on the IM's pod needs one: in a state entered by its delete it is gone already."""
    held = await _pod(world, pod)
    if held is None or held["metadata"].get("deletionTimestamp"):
        raise NotExpressible(f"pod {pod} is already being deleted in this state (no pod to act on)")


# --- the API server ---------------------------------------------------------------------------------------


def api_fault(**knobs: Any) -> Inject:
    async def inject(world: World) -> Clear:
        world.sandbox.emulator.faults.update(knobs)

        async def clear() -> None:
            world.sandbox.emulator.faults.reset()

        return clear

    return inject


# --- processes and the bus ----------------------------------------------------------------------------------


async def kill_9(world: World) -> Clear:
    await world.kill_decider()

    async def clear() -> None:
        await world.restart_decider()

    return clear


async def nats_restart(world: World) -> Clear:
    await asyncio.to_thread(world.nats.restart)
    return nothing_to_clear


async def _stored(world: World, subject: str) -> list[tuple[bytes, dict[str, str]]]:
    """Every message LH_OBJECTS holds on `subject`, oldest first (data and headers)."""
    psub = await world.bus.js.pull_subscribe(
        subject,
        stream=OBJECTS_STREAM,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=5.0),
    )
    found: list[tuple[bytes, dict[str, str]]] = []
    try:
        info = await world.bus.js.stream_info(OBJECTS_STREAM, subjects_filter=subject)
        count = int((info.state.subjects or {}).get(subject, 0))
        while len(found) < count:
            for msg in await psub.fetch(count - len(found), timeout=5):
                found.append((msg.data, dict(msg.headers or {})))
                await msg.ack()
    finally:
        with contextlib.suppress(Exception):
            await psub.unsubscribe()
    return found


async def _republish(
    world: World, which: Callable[[list[tuple[bytes, dict[str, str]]]], list[bytes]]
) -> None:
    sent = 0
    for subject in world.spec.event_subjects(world):
        for number, data in enumerate(which(await _stored(world, subject))):
            # a fresh message id: JetStream's dedup would drop the copy otherwise, as it should
            await world.bus.js.publish(subject, data, headers={"Nats-Msg-Id": f"explore-{subject}-{number}"})
            sent += 1
    if not sent:
        raise NotExpressible("no event of the target on LH_OBJECTS to repeat")


async def duplicate_events(world: World) -> Clear:
    """The newest event of each target object delivered again, twice (a restarted publisher)."""
    await _republish(world, lambda stored: [stored[-1][0], stored[-1][0]] if stored else [])
    return nothing_to_clear


async def out_of_order_events(world: World) -> Clear:
    """The oldest stored event of each target object delivered after the newest."""
    await _republish(world, lambda stored: [stored[0][0]] if len(stored) > 1 else [])
    return nothing_to_clear


CATALOGUE: dict[str, Inject] = {
    "target-deleted": target_deleted,
    "target-changed": target_changed,
    "node-notready": node_not_ready,
    "node-cordoned": node_cordoned,
    "instance-starting": instance_starting,
    "instance-starting-slow-api": instance_starting_slow_api,
    "instance-starting-mid-delete": instance_starting_mid_delete,
    "instance-stopping": instance_stopping,
    "volume-attached": volume_attached,
    "volume-detached": volume_detached,
    "volume-degraded": volume_degraded,
    "volume-deleted": volume_deleted,
    "pod-deleted": pod_deleted,
    "setting-changed": setting_changed,
    "api-latency": api_fault(latency_s=0.3),
    "api-409": api_fault(conflict_rate=0.5),
    "api-429": api_fault(throttle_rate=0.5, retry_after_s=1),
    "api-500": api_fault(error_rate=0.3),
    "kill-9": kill_9,
    "nats-restart": nats_restart,
    "duplicate-events": duplicate_events,
    "out-of-order-events": out_of_order_events,
}
"""Every fault, by the name explore.json records."""

STATIC_LACKS = {
    "node-deleted": "the simulator plays no node removal: deleting a node leaves its instance managers,"
    " engines, replicas and pods running (no node controller, no pod garbage collection)",
}
"""Faults the sandbox cannot express in any world, with what it lacks (no stack is started)."""

FAULTS = (*CATALOGUE, *STATIC_LACKS)
"""The catalogue's names, in explore.json's order."""
