"""im-restart as a decision service on the kit: its configuration, the kinds it reads and
commands, its decider and its scrape-time gauges. Everything else is the kit's runner."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
from prometheus_client.core import GaugeMetricFamily, Metric

from corral_decision import Clock, DecisionConfig, DecisionService, LonghornLoop
from corral_im_restart.commands import SERVICE, command_mode
from corral_im_restart.core import READS, DeciderConfig, ImRestartDecider
from corral_im_restart.progress import ImProgress
from corral_upgradepath.hooks import bus_gate


class ImRestartConfig(DecisionConfig, kw_only=True, frozen=True):
    max_concurrent_im_restarts: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Settings restarts in flight at once, cluster-wide (CORRAL_MAX_CONCURRENT_IM_RESTARTS);
    0 = unlimited, as Longhorn. Deletes of failed pods are never held back."""
    max_concurrent_im_restarts_per_node: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Settings restarts in flight at once per node; 0 = unlimited, as Longhorn."""
    restart_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """How long a restart holds its slot while the replacement pod does not run."""
    settings_settle_s: Annotated[float, msgspec.Meta(ge=0)] = 2.0
    """After a danger-zone setting changes, an already idle IM waits this long since the latest
    change before its settings restart: one restart for a burst of changes (CORRAL_SETTINGS_SETTLE_S;
    0 = none). An IM that turns idle later (a detach) is never held."""

    def decider_config(self) -> DeciderConfig:
        return DeciderConfig(
            timing=self.timing(),
            max_restarts=self.max_concurrent_im_restarts,
            max_restarts_per_node=self.max_concurrent_im_restarts_per_node,
            restart_timeout=self.restart_timeout_s,
            settle=self.settings_settle_s,
        )


def new_decider(config: ImRestartConfig, clock: Clock) -> ImRestartDecider:
    return ImRestartDecider(clock, config.decider_config())


def gauges(decider: ImRestartDecider) -> Iterable[Metric]:
    """Read from the decider when Prometheus scrapes, not on every event."""
    unsynced = GaugeMetricFamily(
        "corral_im_unsynced",
        "Instance managers whose pod lags a danger-zone setting, per node and setting.",
        labels=["node", "setting"],
    )
    for (node, setting), count in sorted(decider.unsynced_by_node().items()):
        unsynced.add_metric([node, setting], count)
    in_flight = GaugeMetricFamily(
        "corral_im_restart_in_flight",
        "Settings restarts under way (delete sent, replacement not running yet), per node.",
        labels=["node"],
    )
    for node, count in sorted(decider.slots.in_flight_by_node().items()):
        in_flight.add_metric([node], count)
    waiting = GaugeMetricFamily(
        "corral_im_restart_waiting", "Instance managers due a settings restart, held by a concurrency limit."
    )
    waiting.add_metric([], decider.slots.waiting_count())
    managers = GaugeMetricFamily("corral_im_restart_instance_managers", "Instance managers in the view.")
    managers.add_metric([], sum(1 for r in decider.view.records.values() if r.im is not None))
    return [unsynced, in_flight, waiting, managers]


def longhorn_restarting(decider: Any) -> bool:
    """longhorn-manager's instance-manager controller restarts idle instance-manager pods that lag
    the settings whenever the manager runs (longhorn-behaviour.md §4.3): nothing switches it off."""
    return True


LONGHORN_LOOP = LonghornLoop(
    name="instance-manager controller (pod restarts for unapplied settings)",
    is_on=longhorn_restarting,
    state=lambda decider: "longhorn-manager has no switch for it",
)


DEFINITION = DecisionService(
    name=SERVICE,
    config=ImRestartConfig,
    reads=READS,
    commands=frozenset({"pod", "instancemanager"}),
    new_decider=new_decider,
    gauges=gauges,
    # Restarts counted by reason (`settings-unsynced`, `pod-failed`), condition writes as `condition`.
    command_mode=command_mode,
    # Decided from the watcher's view on the bus: this service holds no API credentials.
    startup=(bus_gate,),
    progress=ImProgress,
    longhorn_loop=LONGHORN_LOOP,
)
