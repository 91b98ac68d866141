"""Start-up hooks: checks a service registers that must pass before its main may act.

The harness runs them in order once NATS answers and stops the service (exit 1) at the first that
refuses. It knows nothing of what they check: the upgrade-path gate (`corral_upgradepath.hooks`) is
one such hook, so neither semver rules nor a Kubernetes client are dependencies of the harness, and a
decision service that reads the cluster only through the bus carries no Kubernetes client at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from corral_bus.connection import Bus
from corral_runtime.config import ServiceConfig


class StartupVerdict(Protocol):
    """What a hook answers: may the service go on, and one line that says why."""

    @property
    def allowed(self) -> bool: ...

    def summary(self) -> str: ...


StartupHook = Callable[[Bus, ServiceConfig], Awaitable[StartupVerdict]]
