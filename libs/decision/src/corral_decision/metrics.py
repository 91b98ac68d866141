"""What every decision service reports, named after the service (`corral_<service>_…`).

The counters and histograms are the runner's (events, commands, results, adoption, takeover and
decision time); the figures that are a service's own (in flight per node, pending settings…) come
from its definition's `gauges`, read from the decider when Prometheus scrapes, never per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral_decision.decider import Runnable


class ScrapeGauges(Collector):
    """The service's own gauges plus the expectations count, computed at scrape time."""

    def __init__(
        self, prefix: str, decider: Runnable, gauges: Callable[[Runnable], Iterable[Metric]] | None
    ) -> None:
        self.prefix = prefix
        self.decider = decider
        self.gauges = gauges

    def collect(self) -> Iterable[Metric]:
        pending = GaugeMetricFamily(
            f"{self.prefix}_expectations", "Commands in flight that the view does not reflect yet."
        )
        pending.add_metric([], sum(1 for _ in self.decider.expectations()))
        yield pending
        if self.gauges is not None:
            yield from self.gauges(self.decider)


class RunnerMetrics:
    def __init__(
        self,
        prefix: str,
        registry: CollectorRegistry | None,
        decider: Runnable,
        gauges: Callable[[Runnable], Iterable[Metric]] | None = None,
    ) -> None:
        self.events = Counter(
            f"{prefix}_events", "Object events applied, by kind.", ["kind"], registry=registry
        )
        self.bad_events = Counter(
            f"{prefix}_bad_events", "Object events that could not be read (skipped).", registry=registry
        )
        self.commands = Counter(
            f"{prefix}_commands", "Commands published, by mode.", ["mode"], registry=registry
        )
        self.publish_failures = Counter(
            f"{prefix}_publish_failures", "Commands JetStream did not store.", registry=registry
        )
        self.results = Counter(
            f"{prefix}_results", "Command results received, by outcome.", ["outcome"], registry=registry
        )
        self.adopted = Counter(
            f"{prefix}_adopted_commands",
            "Commands of other replicas (or an earlier run) counted as in flight here.",
            registry=registry,
        )
        self.takeover_seconds = Histogram(
            f"{prefix}_takeover_seconds",
            "From becoming leader to the first decision (catching up with the bus).",
            buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
            registry=registry,
        )
        self.decision_seconds = Histogram(
            f"{prefix}_decision_seconds",
            "Time of one decide() call.",
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
            registry=registry,
        )
        if registry is not None:
            registry.register(ScrapeGauges(prefix, decider, gauges))
