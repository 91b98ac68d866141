"""An Event only under its sender's own name, and only about the kinds of objects it works on.

Every service may ask for Kubernetes Events, which is how an operator with only `kubectl` learns
what corral does. But "any Event" let the issue-29 probe, holding only the watcher's credentials
(every component may publish the start-up gate's Events), write any Event about any object in any
component's name. So an Event is checked on its body before it is created:

* a decision service's Event names it as its source (`source.component` and `reportingComponent`
  are `corral-<service>`, or the bare service name setting-sync uses), and is about an object of a
  kind that service commands (its policy's other rules), or the Setting it reports its stance on;
* the start-up gate's Events (`upgrade-gate`) are about the `current-longhorn-version` Setting only,
  in the name of one of corral's components.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from corral_model.envelopes import Command

GATE_SERVICE = "upgrade-gate"
VERSION_SETTING = "current-longhorn-version"
STANCE_KIND = "Setting"
"""Where coexistence stance Events go (corral_decision.coexistence: a Setting of Longhorn's)."""


def _field(body: Mapping[str, Any], *path: str) -> str:
    value: Any = body
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value if isinstance(value, str) else ""


def event_refusal(
    command: Command, services: Collection[str], commanded_kinds: Mapping[str, frozenset[str]]
) -> str | None:
    """Why this Event may not be created by `command.service`, or None."""
    body = command.body if isinstance(command.body, Mapping) else {}
    components = {_field(body, "source", "component"), _field(body, "reportingComponent")} - {""}
    kind = _field(body, "involvedObject", "kind")
    if command.service == GATE_SERVICE:
        allowed_names = {f"corral-{s}" for s in services if s != GATE_SERVICE}
        if not components or not components <= allowed_names:
            return f"an upgrade-gate Event names a corral component as its source, not {sorted(components)}"
        if kind != STANCE_KIND or _field(body, "involvedObject", "name") != VERSION_SETTING:
            return f"an upgrade-gate Event is about the {VERSION_SETTING} Setting only"
        return None
    own = {command.service, f"corral-{command.service}"}
    if not components or not components <= own:
        return (
            f"an Event of {command.service} names {command.service} as its source, not {sorted(components)}"
        )
    kinds = commanded_kinds.get(command.service, frozenset()) | {STANCE_KIND}
    if kind not in kinds:
        works_on = ", ".join(sorted(kinds))
        return f"an Event of {command.service} is about the kinds it works on ({works_on}), not {kind!r}"
    return None
