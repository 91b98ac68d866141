"""Beside an unmodified longhorn-manager: each decision service, run by the kit's runner on the
in-memory bus, refuses to drive a loop Longhorn drives too (mode act), observes it (mode auto),
and acts only once Longhorn's loop is off. What it publishes is all an operator gets: Events
(the refusal, what it would do) and no command that changes the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from corral_bus import Bus
from corral_dangerzone.settings import DangerZoneSettings
from corral_decision import DecisionRunner, DecisionService, Mode, Stance
from corral_decision.coexistence import Coexistence, LonghornLoop, stance_of
from corral_engine_upgrade.service import DEFINITION as ENGINE_UPGRADE
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING
from corral_im_restart.service import DEFINITION as IM_RESTART
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent, Target, Verb, new_command
from corral_runtime.logs import get_logger
from corral_setting_sync.service import DEFINITION as SETTING_SYNC
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen
from tests.fixtures.processes import eventually
from tests.integration.decision.toy import DONE, ToyDecider
from tests.unit.engine_upgrade import cluster as eu
from tests.unit.im_restart import cluster as imr
from tests.unit.setting_sync import cluster as ss

NS = "longhorn-system"

Seen = list[tuple[Msg, Command]]


class Service:
    """One leading replica of a decision service on the bus, in a given mode."""

    def __init__(self, bus: Bus, definition: DecisionService[Any], mode: Mode, **config: Any) -> None:
        self.registry = CollectorRegistry()
        self.definition = definition
        settings = {"service": definition.name, "instance": "unit", "debounce_s": 0.0, "mode": str(mode)}
        self.runner = DecisionRunner(
            definition,
            bus,
            msgspec.convert({**settings, **config}, definition.config),
            get_logger(service=definition.name),
            self.registry,
        )
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.runner.run(self.stop))

    def metric(self, name: str, **labels: str) -> float:
        prefix = self.definition.metric_prefix
        return self.registry.get_sample_value(f"{prefix}_{name}", labels) or 0.0

    async def close(self) -> None:
        self.stop.set()
        async with asyncio.timeout(10):
            await self.task


@pytest.fixture
async def started(fake_bus: Bus) -> AsyncIterator[Callable[..., Service]]:
    services: list[Service] = []

    def start(definition: DecisionService[Any], mode: Mode, **config: Any) -> Service:
        services.append(Service(fake_bus, definition, mode, **config))
        return services[-1]

    yield start
    for service in services:
        await service.close()


def events(seen: Seen, reason: str) -> list[dict[str, Any]]:
    return [c.body for _, c in seen if c.target.kind == "Event" and c.body and c.body["reason"] == reason]


def changes(seen: Seen) -> list[Command]:
    """Commands that would change the cluster (anything but an Event)."""
    return [c for _, c in seen if c.target.kind != "Event"]


async def settled(service: Service, more: Callable[[], Awaitable[None]]) -> None:
    """Publish `more` traffic twice and wait each time for a decision pass after it: the runner's
    loop publishes a pass's commands before its next pass, so whatever the first traffic made the
    service decide has been published once the second pass ran."""
    for _ in range(2):
        applied = service.metric("events_total", kind="node") + service.metric("events_total", kind="setting")
        await more()

        def seen_it(before: float = applied) -> bool:
            now = service.metric("events_total", kind="node") + service.metric("events_total", kind="setting")
            return now > before

        await eventually(seen_it, within=5, what="the traffic applied")
        passes = service.metric("decision_seconds_count")

        def passed(before: float = passes) -> bool:
            return service.metric("decision_seconds_count") > before

        await eventually(passed, within=5, what="a decision pass after it")


# --- the table ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "loop_on", "stance"),
    [
        (Mode.REPLACE, True, Stance.ACTING),
        (Mode.REPLACE, False, Stance.ACTING),
        (Mode.ACT, False, Stance.ACTING),
        (Mode.ACT, True, Stance.REFUSING),
        (Mode.AUTO, False, Stance.ACTING),
        (Mode.AUTO, True, Stance.OBSERVING),
        (Mode.OBSERVE, False, Stance.OBSERVING),
        (Mode.OBSERVE, True, Stance.OBSERVING),
    ],
)
def test_the_stance_follows_the_mode_and_longhorns_loop(mode: Mode, loop_on: bool, stance: Stance) -> None:
    assert stance_of(mode, loop_on) is stance


def test_a_withheld_intent_is_reported_once_not_per_pass() -> None:
    decider = ToyDecider(clock=lambda: 0.0)
    coexistence = Coexistence("toy", None, Mode.OBSERVE, NS, decider)
    target = Target(kind="Setting", namespace=NS, name="s0")
    command = new_command(service="toy", verb=Verb.PATCH, target=target, changes=DONE, reason="make it done")
    first, withheld = coexistence.screen([command], now=100.0)
    assert [c.body["reason"] for c in first if c.body] == ["CorralObserving", "CorralWouldAct"]
    assert [r.command_id for r in withheld] == [command.id] and withheld[0].dry_run
    again, withheld = coexistence.screen([command], now=200.0)
    assert again == [] and len(withheld) == 1  # still withheld, not reported again


@pytest.mark.parametrize("mode", list(Mode))
def test_the_mode_and_stance_are_told_on_the_first_pass_and_on_every_change(mode: Mode) -> None:
    """What the runner logs: once when it first decides, then only when the stance changes."""
    decider = ToyDecider(clock=lambda: 0.0)
    told: list[tuple[Mode, Stance, str]] = []
    loop_on = [True]
    loop = LonghornLoop(name="toy loop", is_on=lambda _: loop_on[0])
    coexistence = Coexistence("toy", loop, mode, NS, decider, on_stance=lambda *said: told.append(said))
    resynced: ObjectEvent[Any] = ObjectEvent(type=EventType.RESYNCED, kind="setting", namespace=NS, name="")
    decider.apply(resynced)  # the view is complete: the stance means something
    coexistence.screen([], now=1.0)
    coexistence.screen([], now=2.0)
    first = stance_of(mode, True)
    assert [(m, s) for m, s, _ in told] == [(mode, first)]
    assert f"mode {mode}" in told[0][2]
    loop_on[0] = False
    coexistence.screen([], now=3.0)
    coexistence.screen([], now=4.0)
    expected = [first] if stance_of(mode, False) is first else [first, stance_of(mode, False)]
    assert [s for _, s, _ in told] == expected


# --- engine-upgrade ------------------------------------------------------------------------------------


async def engine_upgrade_cluster(watcher: FakeWatcher, longhorn_limit: str) -> None:
    """Two owner nodes with two attached volumes each on the old image; the new image is the
    default, deployed everywhere: the upgrade is due on four volumes."""
    await watcher.put(*(eu.longhorn_node(n) for n in eu.NODES))
    await watcher.put(eu.engine_image(eu.OLD, api=5), eu.engine_image(eu.NEW))
    await watcher.put(eu.setting(DEFAULT_IMAGE_SETTING, eu.NEW), eu.setting(LIMIT_SETTING, longhorn_limit))
    for name, owner in (("v1", "n1"), ("v2", "n1"), ("v3", "n2"), ("v4", "n2")):
        await watcher.put(eu.volume(name, owner=owner))
        await watcher.put(*(eu.replica(name, i, n) for i, n in enumerate(eu.NODES)))
    await watcher.resync(["engineimage", "node", "replica", "setting", "volume"])


async def test_engine_upgrade_in_mode_act_refuses_while_longhorns_loop_is_on_then_acts_when_off(
    fake_bus: Bus, started: Callable[..., Service]
) -> None:
    watcher = FakeWatcher(fake_bus, NS)
    await engine_upgrade_cluster(watcher, longhorn_limit="2")
    async with commands_seen(fake_bus, "engine-upgrade", events=True) as seen:
        service = started(ENGINE_UPGRADE, Mode.ACT, per_node_limit=1, retry_backoff_s=0.5)
        await eventually(lambda: events(seen, "CorralRefusedToAct"), within=5, what="the refusal Event")
        [refusal] = events(seen, "CorralRefusedToAct")
        assert refusal["type"] == "Warning"
        assert refusal["involvedObject"]["kind"] == "Setting"
        assert refusal["involvedObject"]["name"] == LIMIT_SETTING
        assert f"{LIMIT_SETTING} is 2" in refusal["message"] and "drive it twice" in refusal["message"]
        await eventually(lambda: len(events(seen, "CorralWouldAct")) == 2, within=5, what="two would-act")
        assert {e["involvedObject"]["name"] for e in events(seen, "CorralWouldAct")} == {"v1", "v3"}
        # named by uid too, so `kubectl describe volume` lists them
        assert {e["involvedObject"]["uid"] for e in events(seen, "CorralWouldAct")} == {"uid-v1", "uid-v3"}
        assert service.runner.coexistence.refusing  # the readiness probe `coexistence` fails
        assert service.metric("coexistence", mode="act", stance="refusing") == 1
        assert service.metric("longhorn_loop_on") == 1
        assert service.metric("withheld_commands_total", stance="refusing") >= 2
        await settled(service, lambda: watcher.put(eu.longhorn_node("n1")))
        assert changes(seen) == []

        # Longhorn's loop switched off: corral acts, with its own limit (1 per owner node).
        await watcher.put(eu.setting(LIMIT_SETTING, "0"))
        await eventually(lambda: len(changes(seen)) == 2, within=10, what="one upgrade per owner node")
        assert sorted(c.target.name for c in changes(seen)) == ["v1", "v3"]
        assert all(c.verb is Verb.PATCH and c.changes[0].value == eu.NEW for c in changes(seen))
        assert events(seen, "CorralActing") and not service.runner.coexistence.refusing
        assert service.metric("coexistence", mode="act", stance="acting") == 1


async def test_engine_upgrade_in_mode_auto_observes_while_longhorns_loop_is_on(
    fake_bus: Bus, started: Callable[..., Service]
) -> None:
    watcher = FakeWatcher(fake_bus, NS)
    await engine_upgrade_cluster(watcher, longhorn_limit="2")
    async with commands_seen(fake_bus, "engine-upgrade", events=True) as seen:
        service = started(ENGINE_UPGRADE, Mode.AUTO, per_node_limit=1)
        await eventually(lambda: events(seen, "CorralObserving"), within=5, what="the observing Event")
        assert events(seen, "CorralObserving")[0]["type"] == "Normal"
        # Longhorn's loop moves v2 (what corral would have picked is v1): the Event says so.
        await watcher.put(eu.upgraded(eu.volume("v2", owner="n1")))
        await eventually(lambda: events(seen, "EngineUpgradeStarted"), within=5, what="the started Event")
        [started_event] = events(seen, "EngineUpgradeStarted")
        assert started_event["involvedObject"] == {
            "kind": "Volume",
            "name": "v2",
            "apiVersion": "longhorn.io/v1beta2",
            "namespace": NS,
            "uid": "uid-v2",
        }
        await settled(service, lambda: watcher.put(eu.longhorn_node("n1")))
        assert changes(seen) == []
        assert not service.runner.coexistence.refusing


async def test_engine_upgrade_in_mode_replace_acts_on_longhorns_setting_and_says_nothing_of_it(
    fake_bus: Bus, started: Callable[..., Service]
) -> None:
    watcher = FakeWatcher(fake_bus, NS)
    await engine_upgrade_cluster(watcher, longhorn_limit="2")
    async with commands_seen(fake_bus, "engine-upgrade", events=True) as seen:
        started(ENGINE_UPGRADE, Mode.REPLACE)
        await eventually(lambda: len(changes(seen)) == 4, within=5, what="Longhorn's limit, 2 per node")
        assert [c for _, c in seen if c.body and c.body["reason"].startswith("Corral")] == []


# --- setting-sync and im-restart: Longhorn's loop cannot be switched off ---------------------------------


async def setting_sync_cluster(watcher: FakeWatcher, cluster_scoped: FakeWatcher) -> None:
    """A priority class set and not applied, nothing attached: setting-sync would act at once."""
    await watcher.put(
        ss.workload(lh.Deployment, "csi-attacher"),
        ss.component_pod("instance-manager-n1"),
        ss.volume("pvc-a", "detached"),
        ss.setting("priority-class", "high-priority", applied=True),
    )
    await watcher.resync(["daemonset", "deployment", "instancemanager", "node", "pod", "setting", "volume"])
    await cluster_scoped.resync(["kubenode"])


async def im_restart_cluster(watcher: FakeWatcher, cluster_scoped: FakeWatcher) -> None:
    """An idle instance manager whose pod lags the priority-class setting: im-restart would act."""
    node, kube = imr.ready_node("node-1"), imr.kube_node("node-1")
    manager = imr.instance_manager("im-1", "node-1")
    await watcher.put(node, manager, imr.im_pod(manager, DangerZoneSettings.defaults(), node, kube))
    await watcher.put(imr.setting("priority-class", "high-priority"))
    await cluster_scoped.put(kube)
    await watcher.resync(["instancemanager", "node", "pod", "setting"])
    await cluster_scoped.resync(["kubenode"])


async def _cluster_for(definition: DecisionService[Any], bus: Bus) -> FakeWatcher:
    watcher, cluster_scoped = FakeWatcher(bus, NS), FakeWatcher(bus, "", rv=10_000)
    if definition is SETTING_SYNC:
        await setting_sync_cluster(watcher, cluster_scoped)
    else:
        await im_restart_cluster(watcher, cluster_scoped)
    return watcher


@pytest.mark.parametrize("definition", [SETTING_SYNC, IM_RESTART], ids=["setting-sync", "im-restart"])
async def test_a_service_whose_longhorn_loop_cannot_be_switched_off_refuses_in_mode_act(
    fake_bus: Bus, started: Callable[..., Service], definition: DecisionService[Any]
) -> None:
    watcher = await _cluster_for(definition, fake_bus)
    async with commands_seen(fake_bus, definition.name, events=True) as seen:
        service = started(definition, Mode.ACT)
        await eventually(lambda: events(seen, "CorralRefusedToAct"), within=5, what="the refusal Event")
        [refusal] = events(seen, "CorralRefusedToAct")
        assert refusal["type"] == "Warning"
        assert refusal["involvedObject"]["name"] == "current-longhorn-version"
        assert "cannot be switched off" in refusal["message"]
        await eventually(lambda: events(seen, "CorralWouldAct"), within=5, what="what it would do")
        await settled(
            service, lambda: watcher.put(lh.Setting(metadata=lh.ObjectMeta(name="marker", namespace=NS)))
        )
        assert changes(seen) == []
        assert service.runner.coexistence.refusing
        assert service.metric("coexistence", mode="act", stance="refusing") == 1


@pytest.mark.parametrize("definition", [SETTING_SYNC, IM_RESTART], ids=["setting-sync", "im-restart"])
async def test_a_service_whose_longhorn_loop_cannot_be_switched_off_observes_in_mode_auto(
    fake_bus: Bus, started: Callable[..., Service], definition: DecisionService[Any]
) -> None:
    await _cluster_for(definition, fake_bus)
    async with commands_seen(fake_bus, definition.name, events=True) as seen:
        service = started(definition, Mode.AUTO)
        await eventually(lambda: events(seen, "CorralWouldAct"), within=5, what="what it would do")
        assert events(seen, "CorralObserving") and not events(seen, "CorralRefusedToAct")
        would: Sequence[dict[str, Any]] = events(seen, "CorralWouldAct")
        assert all("withheld, observing" in e["message"] for e in would)
        assert changes(seen) == []
        assert not service.runner.coexistence.refusing
        assert service.metric("coexistence", mode="auto", stance="observing") == 1
