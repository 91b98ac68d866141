"""v2-upgrade as a decision service on the kit: its configuration, the kinds it reads and
commands, and its decider. Everything else is the kit's runner."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import msgspec
from prometheus_client.core import GaugeMetricFamily, Metric

from corral_decision import Clock, DecisionConfig, DecisionService
from corral_upgradepath.hooks import bus_gate
from corral_v2_upgrade.commands import SERVICE
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.core import COMMANDS, READS, V2UpgradeDecider
from corral_v2_upgrade.progress import ProgressModel
from corral_v2_upgrade.states import is_terminal


class V2UpgradeConfig(DecisionConfig, kw_only=True, frozen=True):
    node_timeout_s: Annotated[float, msgspec.Meta(ge=0)] = 1800.0
    """A node upgrade unfinished this long after it started is aborted and restored; 0 = never."""
    max_node_retries: Annotated[int, msgspec.Meta(ge=1)] = 5
    """Failed attempts per node before it is marked `error` and the manager moves on."""
    snapshot_before_upgrade: bool = False
    """Snapshot each attached volume of a node before upgrading it (CORRAL_SNAPSHOT_BEFORE_UPGRADE)."""
    upgrade_events: bool = True
    """Record Kubernetes Events on the DataEngineUpgradeManager and NodeDataEngineUpgrade CRs, one
    per transition (CORRAL_UPGRADE_EVENTS)."""

    def decider_config(self) -> DeciderConfig:
        return DeciderConfig(
            timing=self.timing(),
            node_timeout=self.node_timeout_s,
            max_retries=self.max_node_retries,
            snapshot_before_upgrade=self.snapshot_before_upgrade,
            events=self.upgrade_events,
        )


def new_decider(config: V2UpgradeConfig, clock: Clock) -> V2UpgradeDecider:
    return V2UpgradeDecider(clock, config.decider_config())


def gauges(decider: V2UpgradeDecider) -> Iterable[Metric]:
    """Node upgrades in flight (at most one, by design) and managers per state."""
    in_flight = GaugeMetricFamily(
        "corral_v2_upgrade_nodes_in_flight", "Node upgrades not completed or in error (at most 1)."
    )
    in_flight.add_metric(
        [], sum(1 for u in decider.view.node_upgrades.values() if not is_terminal(u.status.state))
    )
    managers = GaugeMetricFamily(
        "corral_v2_upgrade_managers", "DataEngineUpgradeManagers per state.", labels=["state"]
    )
    states: dict[str, int] = {}
    for manager in decider.view.managers.values():
        state = manager.status.state or "undefined"
        states[state] = states.get(state, 0) + 1
    for state, count in sorted(states.items()):
        managers.add_metric([state], count)
    return [in_flight, managers]


DEFINITION = DecisionService(
    name=SERVICE,
    config=V2UpgradeConfig,
    reads=READS,
    commands=COMMANDS,
    new_decider=new_decider,
    gauges=gauges,
    # Decided from the watcher's view on the bus: this service holds no API credentials.
    startup=(bus_gate,),
    progress=ProgressModel,
)
