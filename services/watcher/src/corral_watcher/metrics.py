"""The watcher's Prometheus metrics: is it keeping up, and how often does it have to start over.

Labels are per kind; the children are bound once per kind (`KindMetrics`) because a label lookup
per event would cost more than the event's own bookkeeping. Lag and publish latency are observed
once per batch, not per event, for the same reason.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class WatcherMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A private registry unless the service's is given: tests run several watchers per process.
        self.registry = registry if registry is not None else CollectorRegistry()
        self._count_what_went_through(self.registry)
        self._measure_keeping_up(self.registry)

    def _count_what_went_through(self, r: CollectorRegistry) -> None:
        """Events published, and every way a kind had to start over or skip an object."""
        self.events = Counter(
            "corral_watcher_events_published",
            "Object events published to LH_OBJECTS, by kind and event type.",
            ["kind", "type"],
            registry=r,
        )
        self.relists = Counter(
            "corral_watcher_relists",
            "Full lists of a kind, by why they were needed.",
            ["kind", "reason"],
            registry=r,
        )
        self.gone = Counter(
            "corral_watcher_gone",
            "410 Gone answers: the watch's resourceVersion was compacted.",
            ["kind"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "corral_watcher_watch_restarts",
            "Watches re-opened from the last resourceVersion, by why the previous one ended.",
            ["kind", "reason"],
            registry=r,
        )
        self.undecodable = Counter(
            "corral_watcher_undecodable_lines",
            "Objects (listed, or watch lines) that could not be decoded, once per resourceVersion:"
            " each went to LH_DEAD.",
            ["kind"],
            registry=r,
        )
        self.contradicted = Counter(
            "corral_watcher_contradicted_events",
            "Messages LH_OBJECTS held that claimed a newer state of an object than the API server has"
            " (forged, or from another cluster), replaced by the API server's object; by kind.",
            ["kind"],
            registry=r,
        )

    def _measure_keeping_up(self, r: CollectorRegistry) -> None:
        """What it knows now, and how far behind the API server it is."""
        self.unreadable_objects = Gauge(
            "corral_watcher_unreadable_objects",
            "Objects that exist but do not decode now (announced UNREADABLE on LH_OBJECTS), by kind.",
            ["kind"],
            registry=r,
        )
        self.objects = Gauge(
            "corral_watcher_objects",
            "Objects currently known, by kind.",
            ["kind"],
            registry=r,
        )
        self.lag = Histogram(
            "corral_watcher_lag_seconds",
            "From receiving an event from the API server to its ack by LH_OBJECTS.",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.publish_latency = Histogram(
            "corral_watcher_publish_latency_seconds",
            "From publishing an event to its ack by LH_OBJECTS.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when never set): for tests and benchmarks."""
        return self.registry.get_sample_value(name, labels) or 0.0


class KindMetrics:
    """The children of WatcherMetrics for one kind."""

    def __init__(self, metrics: WatcherMetrics, kind: str) -> None:
        self.parent = metrics
        self.kind = kind
        self.added = metrics.events.labels(kind, "ADDED")
        self.modified = metrics.events.labels(kind, "MODIFIED")
        self.deleted = metrics.events.labels(kind, "DELETED")
        self.resynced = metrics.events.labels(kind, "RESYNCED")
        self.unreadable = metrics.events.labels(kind, "UNREADABLE")
        self.unreadable_objects = metrics.unreadable_objects.labels(kind)
        self.gone = metrics.gone.labels(kind)
        self.undecodable = metrics.undecodable.labels(kind)
        self.lag = metrics.lag.labels(kind)
        self.publish_latency = metrics.publish_latency
        self.objects = metrics.objects.labels(kind)

    def relist(self, reason: str) -> None:
        self.parent.relists.labels(self.kind, reason).inc()

    def watch_restart(self, reason: str) -> None:
        self.parent.watch_restarts.labels(self.kind, reason).inc()
