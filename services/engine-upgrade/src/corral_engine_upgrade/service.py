"""engine-upgrade as a decision service on the kit: its configuration, the kinds it reads and
commands, its decider and its scrape-time gauges. Everything else is the kit's runner.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import msgspec
from prometheus_client.core import GaugeMetricFamily, Metric

from corral_decision import Clock, DecisionConfig, DecisionService, LonghornLoop, Mode
from corral_decision.events import is_event
from corral_engine_upgrade.core import SERVICE, DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.progress import ProgressModel
from corral_engine_upgrade.rollback import RollbackMode
from corral_engine_upgrade.stuck import StuckBounds
from corral_engine_upgrade.view import KIND_STRUCTS, LIMIT_SETTING
from corral_engine_upgrade.wave_guard import WaveGuardConfig
from corral_model.envelopes import Command, Target
from corral_upgradepath.hooks import bus_gate


class EngineUpgradeConfig(DecisionConfig, kw_only=True, frozen=True):
    debounce_s: Annotated[float, msgspec.Meta(ge=0)] = 0.002
    """The kit's 10 ms, shortened: under a steady stream a change waits for the next pass, so this
    is most of the decide stage's latency, and a pass costs O(owner nodes made dirty) (the
    `_fill_slots` walk), so passes 2 ms apart cost no measurable CPU more. bench_pipeline at 10 k
    volumes, 2 000 changes/s, a quiet host: p50 / p99 12.9 / 22.4 ms at 10 ms, 9.9 / 13.6 ms at
    2 ms; engine-upgrade's CPU per change 79 / 71 µs (within noise)."""
    tombstone_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """How long a deleted object's resourceVersion is remembered to reject late, older events."""
    per_node_limit: Annotated[int, msgspec.Meta(ge=0)] = 1
    """corral's own limit of upgrades in flight per owner node (CORRAL_PER_NODE_LIMIT) in modes
    act, auto and observe, where Longhorn's `concurrent-automatic-engine-upgrade-per-node-limit`
    must stay 0 (Longhorn's loop off). Mode replace reads Longhorn's setting, as Longhorn does."""
    volume_events: bool = True
    """Record Kubernetes Events on each Volume when its automatic upgrade starts, completes or is
    blocked (CORRAL_VOLUME_EVENTS); one per transition, deduplicated as Kubernetes does."""
    stuck_live_s: Annotated[float, msgspec.Meta(gt=0)] = StuckBounds().live
    """A live upgrade in flight longer than this is named stuck (CORRAL_STUCK_LIVE_S; stuck.py says
    why 10 minutes): a Warning Event on the Volume, the stuck gauge, `corral progress`."""
    stuck_offline_s: Annotated[float, msgspec.Meta(gt=0)] = StuckBounds().offline
    """The same for an offline upgrade (CORRAL_STUCK_OFFLINE_S): 5 minutes."""
    wave_max_failed: Annotated[int, msgspec.Meta(ge=0)] = WaveGuardConfig().max_failed
    """Pause the wave once this many of its volumes failed or got stuck on the new image
    (CORRAL_WAVE_MAX_FAILED; 0: never by count). 3: one bad volume can be bad luck, three is an
    image; and on a small cluster three is already a large part of it (wave_guard.py)."""
    wave_max_failed_share: Annotated[float, msgspec.Meta(gt=0)] = WaveGuardConfig().max_failed_share
    """Or once this share of the wave's volumes did, from 10 of them on (CORRAL_WAVE_MAX_FAILED_SHARE;
    1.0 or more: never by share): 10%."""

    stuck_rollback: RollbackMode = RollbackMode.APPROVED
    """A stuck volume whose old image is still deployed and whose upgrade has not switched over is
    rolled back to the image it runs (CORRAL_STUCK_ROLLBACK; rollback.py): `approved` (the default)
    once the operator approves it with `corral engine-upgrade rollback <volume>`, `auto` as soon as
    it is named stuck, `off` never. A rolled-back volume is held off that image while it is the
    default."""

    def decider_config(self) -> DeciderConfig:
        return DeciderConfig(
            timing=self.timing(),
            tombstone_ttl=self.tombstone_ttl_s,
            limit_override=None if self.mode is Mode.REPLACE else self.per_node_limit,
            announce=self.volume_events,
            stuck=StuckBounds(live=self.stuck_live_s, offline=self.stuck_offline_s),
            wave_guard=WaveGuardConfig(
                max_failed=self.wave_max_failed, max_failed_share=self.wave_max_failed_share
            ),
            rollback=self.stuck_rollback,
        )


def new_decider(config: EngineUpgradeConfig, clock: Clock) -> EngineUpgradeDecider:
    return EngineUpgradeDecider(clock, config.decider_config())


def gauges(decider: EngineUpgradeDecider) -> Iterable[Metric]:
    """Per owner node, read from the decider when Prometheus scrapes, not on every event."""
    in_flight = GaugeMetricFamily(
        "corral_engine_upgrade_in_flight",
        "Upgrades in flight per owner node (view + commands not yet reflected).",
        labels=["node"],
    )
    for node, count in sorted(decider.in_flight_by_node().items()):
        in_flight.add_metric([node], count)
    stuck = GaugeMetricFamily(
        "corral_engine_upgrade_stuck",
        "Upgrades in flight past their stuck bound per owner node: slots they hold (stuck.py).",
        labels=["node"],
    )
    stuck_by_node = decider.stuck_by_node()  # every node with one in flight: 0 is a reading too
    for node in sorted(set(decider.in_flight_by_node()) | set(stuck_by_node)):
        stuck.add_metric([node], stuck_by_node.get(node, 0))
    candidates = GaugeMetricFamily(
        "corral_engine_upgrade_candidates",
        "Volumes waiting for a slot per owner node (known so far under the current rules).",
        labels=["node"],
    )
    for node, count in sorted(decider.candidates_by_node().items()):
        candidates.add_metric([node], count)
    unjudged = GaugeMetricFamily(
        "corral_engine_upgrade_unjudged_volumes",
        "Volumes not yet judged under the current rules (judged lazily after a rules change).",
    )
    unjudged.add_metric([], decider.unclassified())
    volumes = GaugeMetricFamily("corral_engine_upgrade_volumes", "Volumes in the view.")
    volumes.add_metric([], decider.view.volume_count)
    paused = GaugeMetricFamily(
        "corral_engine_upgrade_wave_paused",
        "1 while the wave guard holds the wave paused (the reason is on the default EngineImage).",
    )
    paused.add_metric([], 1 if decider.wave_paused() else 0)
    failed = GaugeMetricFamily(
        "corral_engine_upgrade_wave_failed_volumes",
        "Volumes of the current wave that failed or got stuck on the new image.",
    )
    failed.add_metric([], len(decider.wave_failures()))
    return [in_flight, stuck, candidates, unjudged, volumes, paused, failed]


def longhorn_upgrading(decider: EngineUpgradeDecider) -> bool:
    """Longhorn's own automatic engine upgrade runs while its per-node limit setting is above 0
    (longhorn-behaviour.md §1.1: 0 or less, or not an integer, disables it)."""
    return decider.view.longhorn_limit > 0


def longhorn_limit_state(decider: EngineUpgradeDecider) -> str:
    view = decider.view
    value = f"invalid, {view.limit_error}" if view.limit_error else str(view.longhorn_limit)
    return f"{LIMIT_SETTING} is {value}"


LONGHORN_LOOP = LonghornLoop(
    name="automatic engine upgrade",
    is_on=longhorn_upgrading,
    state=longhorn_limit_state,
    switch_off=f"set the {LIMIT_SETTING} setting to 0; corral then upgrades with its own per_node_limit",
    reported_on=Target(kind="Setting", namespace="", name=LIMIT_SETTING),
)


def upgrade_mode(command: Command) -> str:
    """The `mode` label of `corral_engine_upgrade_commands_total`: an upgrade is `live` or `offline`;
    the Events it also publishes (started, blocked…) are `event`, a stuck volume's rollback is
    `rollback` (rollback.py) and the wave guard's pause mark `pause`, so counting upgrades means
    `mode=~"live|offline"` (the dashboard and the stuck-wave alert do)."""
    if is_event(command):
        return "event"
    if command.target.kind == "EngineImage":
        return "pause"
    reason = command.reason
    if reason.startswith("rollback"):
        return "rollback"
    return "live" if reason.startswith("live") else "offline"


DEFINITION = DecisionService(
    name=SERVICE,
    config=EngineUpgradeConfig,
    reads=KIND_STRUCTS,
    # Volumes' spec.image; the wave guard's pause annotation on the default EngineImage.
    commands=frozenset({"volume", "engineimage"}),
    new_decider=new_decider,
    gauges=gauges,
    command_mode=upgrade_mode,
    # Decided from the watcher's view on the bus: this service holds no API credentials.
    startup=(bus_gate,),
    progress=ProgressModel,
    longhorn_loop=LONGHORN_LOOP,
)
