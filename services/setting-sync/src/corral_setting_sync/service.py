"""setting-sync as a decision service on the kit: its configuration, the kinds it reads and
commands, its decider and its scrape-time gauge. Everything else is the kit's runner."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
from prometheus_client.core import GaugeMetricFamily, Metric

from corral_decision import Clock, DecisionConfig, DecisionService, LonghornLoop
from corral_setting_sync.commands import SERVICE, command_mode
from corral_setting_sync.core import READS, DeciderConfig, SettingSyncDecider
from corral_setting_sync.progress import SettingProgress
from corral_upgradepath.hooks import bus_gate


class SettingSyncConfig(DecisionConfig, kw_only=True, frozen=True):
    settings_settle_s: Annotated[float, msgspec.Meta(ge=0)] = 2.0
    """After a group A/B setting changes while every volume is already detached, wait this long
    since the latest change before restarting components: one restart for a burst of changes
    (CORRAL_SETTINGS_SETTLE_S; 0 = none). The last volume detaching is never held."""

    def decider_config(self) -> DeciderConfig:
        return DeciderConfig(
            timing=self.timing(),
            settle=self.settings_settle_s,
        )


def new_decider(config: SettingSyncConfig, clock: Clock) -> SettingSyncDecider:
    return SettingSyncDecider(clock, config.decider_config())


def gauges(decider: SettingSyncDecider) -> Iterable[Metric]:
    """Read from the decider when Prometheus scrapes, not on every event."""
    pending = GaugeMetricFamily(
        "corral_setting_pending",
        "1 while a danger-zone setting's value is not applied (blocked, applying or invalid).",
        labels=["setting"],
    )
    for setting, value in decider.pending_by_setting().items():
        pending.add_metric([setting], value)
    return [pending]


def longhorn_syncing(decider: Any) -> bool:
    """longhorn-manager's setting controller applies danger-zone settings whenever the manager
    runs (longhorn-behaviour.md §3.3): no setting switches it off, so beside a manager it is on."""
    return True


LONGHORN_LOOP = LonghornLoop(
    name="setting controller (danger-zone settings)",
    is_on=longhorn_syncing,
    state=lambda decider: "longhorn-manager has no switch for it",
)


DEFINITION = DecisionService(
    name=SERVICE,
    config=SettingSyncConfig,
    reads=READS,
    commands=frozenset({"setting", "daemonset", "deployment", "pod", "instancemanager", "event"}),
    new_decider=new_decider,
    gauges=gauges,
    # Commands counted as `template`, `pod`, `instance-manager`, `applied` or `event`.
    command_mode=command_mode,
    # Decided from the watcher's view on the bus: this service holds no API credentials.
    startup=(bus_gate,),
    progress=SettingProgress,
    longhorn_loop=LONGHORN_LOOP,
)
