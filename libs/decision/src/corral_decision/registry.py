"""Finding the decision services: the `corral.deciders` entry point group, never the checkout.

Each decision service's package declares one entry point whose value is its `DecisionService`
definition (`engine-upgrade = "corral_engine_upgrade.service:DEFINITION"`). `corral plan`,
`corral replay`, `corral run` and the tests list services from here, so an installed wheel and a
checkout see the same services.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from corral_decision.service import DecisionService

ENTRY_POINT_GROUP = "corral.deciders"


class UnknownService(LookupError):
    """No installed decision service has that name."""


def decision_services() -> dict[str, DecisionService[Any]]:
    """Every installed decision service by name."""
    found: dict[str, DecisionService[Any]] = {}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        definition = entry.load()
        if not isinstance(definition, DecisionService):
            raise TypeError(f"entry point {entry.name} = {entry.value} is not a DecisionService")
        found[entry.name] = definition
    return found


def decision_service(name: str) -> DecisionService[Any]:
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        definition = entry.load()
        if isinstance(definition, DecisionService):
            return definition
    known = ", ".join(sorted(e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)))
    raise UnknownService(f"no decision service {name!r} is installed (known: {known or 'none'})")
