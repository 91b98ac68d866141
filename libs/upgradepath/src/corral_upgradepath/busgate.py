"""The start-up gate run over the bus: read the view from LH_OBJECTS, decide, ask for the Events.

This is the whole of what a service does before it may act, in one call::

    decision = await enforce_startup_gate(bus, service="engine-upgrade", namespace="longhorn-system")
    if decision.blocked:
        log.error("upgrade path blocked", reason=decision.reason)
        return 1  # exit non-zero without having issued any other command

It reads the `current-longhorn-version` Setting and the EngineImages as the watcher published them
(last message per subject, then new ones), waits until the watcher has listed both kinds at least
once (a RESYNCED marker for each: before that, a missing setting is not evidence of a fresh
install), decides, and publishes the Event commands to LH_COMMANDS with their ids as Nats-Msg-Id.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral_bus import BootstrapReader, Bus, Publisher
from corral_model import subjects
from corral_model.codec import SchemaError, encode
from corral_model.envelopes import ObjectEvent
from corral_upgradepath.build import BuildInfo
from corral_upgradepath.cluster import ClusterView
from corral_upgradepath.decision import GateDecision
from corral_upgradepath.live import read_cluster_view
from corral_upgradepath.startup import StartupView, gate_event_commands, startup_decision

if TYPE_CHECKING:
    from kubernetes_asyncio import client

DEFAULT_WAIT_S = 60.0


class GateUndecidable(RuntimeError):
    """The gate could not see a complete, readable view in time: the service must not start."""


def gate_subjects(namespace: str) -> list[str]:
    ns = subjects.escape_token(namespace)
    return [f"{subjects.OBJECTS_PREFIX}.setting.{ns}.>", f"{subjects.OBJECTS_PREFIX}.engineimage.{ns}.>"]


async def read_startup_view(bus: Bus, namespace: str, *, wait_s: float = DEFAULT_WAIT_S) -> StartupView:
    """The gate's view once complete: bootstrap caught up and both kinds listed by the watcher."""
    view = StartupView(namespace)
    reader = BootstrapReader(bus, gate_subjects(namespace))
    try:
        async with asyncio.timeout(wait_s):
            async for message in reader:
                try:
                    view.apply(message.decode(ObjectEvent[Any]))
                except (SchemaError, ValueError) as e:
                    raise GateUndecidable(f"unreadable message on {message.subject}: {e}") from e
                if reader.ready.is_set() and view.ready:
                    return view
    except TimeoutError:
        raise GateUndecidable(
            f"no complete view of settings and engine images in {namespace} on "
            f"{subjects.OBJECTS_STREAM} within {wait_s:g}s (is the watcher running?)"
        ) from None
    finally:
        await reader.close()
    raise GateUndecidable("the bus connection closed before the view was complete")


async def enforce_startup_gate(
    bus: Bus,
    *,
    service: str,
    namespace: str,
    version_check: bool = True,
    distro: str | None = None,
    build: BuildInfo | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    clock: Callable[[], float] = time.time,
) -> GateDecision:
    """Decide this build's upgrade path from the bus and publish the Event commands.

    Raises GateUndecidable when the view is incomplete or unreadable (treat as blocked), and
    corral_bus.PublishError when the Event commands could not be published.
    """
    view = (await read_startup_view(bus, namespace, wait_s=wait_s)).view()
    decision = startup_decision(view, version_check=version_check, distro=distro, build=build)
    await publish_gate_events(bus, decision, view, service=service, namespace=namespace, now=clock())
    return decision


async def enforce_live_startup_gate(
    bus: Bus,
    api: client.ApiClient,
    *,
    service: str,
    namespace: str,
    version_check: bool = True,
    distro: str | None = None,
    build: BuildInfo | None = None,
    clock: Callable[[], float] = time.time,
) -> GateDecision:
    """The gate for the watcher and the actuator, which the bus view itself depends on: read the
    setting and engine images live (read-only), decide, and publish the Event commands the same way.

    Raises corral_upgradepath.live.LiveReadError when the API server cannot be read.
    """
    view = await read_cluster_view(api, namespace)
    decision = startup_decision(view, version_check=version_check, distro=distro, build=build)
    await publish_gate_events(bus, decision, view, service=service, namespace=namespace, now=clock())
    return decision


async def publish_gate_events(
    bus: Bus, decision: GateDecision, view: ClusterView, *, service: str, namespace: str, now: float
) -> None:
    """Ask the actuator to record the gate's Events (ids as Nats-Msg-Id, so restarts do not repeat)."""
    setting_uid = "" if view.version_setting is None else view.version_setting.metadata.uid
    publisher = Publisher(bus)
    try:
        for command in gate_event_commands(
            decision, service=service, namespace=namespace, now=now, setting_uid=setting_uid
        ):
            subject = subjects.command_subject(command.service, "event", namespace, command.target.name)
            await publisher.publish(subject, encode(command), msg_id=command.id)
        await publisher.flush()
    finally:
        await publisher.close()
