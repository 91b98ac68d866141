"""One Prometheus registry per service, pre-filled with what every corral service reports.

A registry per service (rather than prometheus-client's process-global default) lets tests and
`corral run` host several services in one process without "duplicated timeseries" errors, while a
deployed service still exposes the usual process and Python runtime collectors.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Info
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector


class ServiceMetrics:
    """The gauges the harness keeps current for every service."""

    def __init__(self, registry: CollectorRegistry, service: str, instance: str) -> None:
        self.info = Info("corral_service", "Which corral service this process runs.", registry=registry)
        self.info.info({"service": service, "instance": instance})
        self.ready = Gauge("corral_ready", "1 when the service passes /readyz.", registry=registry)
        self.leader = Gauge(
            "corral_leader", "1 while this replica holds its service's leader lease.", registry=registry
        )
        self.nats_connected = Gauge(
            "corral_nats_connected", "1 while the NATS connection is up.", registry=registry
        )


def new_registry(with_process: bool = True) -> CollectorRegistry:
    """A fresh registry; `with_process` adds the process, platform and GC collectors."""
    registry = CollectorRegistry(auto_describe=True)
    if with_process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry
