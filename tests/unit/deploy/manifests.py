"""What the deployment tests share: the one list of corral's services, and reading manifests.

The list is the `corral.services` entry points the workspace installs. The chart's `services`
values and docker-compose.yml are checked against it, so a service that gains an entry point
(v2-upgrade, one day) shows up as a failing test until both deploy it.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

GROUP = "corral.services"
WITH_KUBE = {"watcher": "read", "actuator": "write"}  # the rest hold no Kubernetes credentials
WEBHOOK = "corral-v2-admission"
"""The v2 admission webhook server: deployed by the chart, but no bus service (no NATS, no entry
point); tests/unit/deploy/test_chart_v2_admission.py checks it."""


def service_entry_points() -> dict[str, str]:
    """Service name → the package `python -m` runs."""
    return {entry.name: entry.value for entry in metadata.entry_points(group=GROUP)}


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The documents of one kind, by name."""
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container_env(workload: dict[str, Any]) -> dict[str, str | None]:
    """The first container's plain environment (name → value; None where it comes from a ref)."""
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def bus_deployments(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Deployments of the services on the bus (every Deployment but the webhook server's)."""
    return {name: d for name, d in of_kind(docs, "Deployment").items() if name != WEBHOOK}
