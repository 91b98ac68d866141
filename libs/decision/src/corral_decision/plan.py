"""`corral plan <service>`: what a decision service would do on a snapshot of a cluster.

The service's own `Decider`, bootstrapped from the snapshot at a fixed time, decides once; the plan
is its first wave and its explanation of every other target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from corral_decision.decider import Explanation
from corral_decision.events import is_event
from corral_decision.service import DecisionService
from corral_decision.snapshot import snapshot_events
from corral_model.envelopes import Command

COMMAND_PENDING = "command-pending"


def plan_snapshot(
    service: DecisionService[Any], document: Mapping[str, Any], now: float
) -> tuple[Sequence[Command], list[Explanation]]:
    decider = service.new_decider(service.config(), lambda: now)
    for event in snapshot_events(document, service.reads):
        decider.apply(event)
    # The plan is the decisions; the Events a decider reports beside them are not plans.
    commands = [c for c in decider.decide() if not is_event(c)]
    # A chosen target explains itself as `command-pending`: the command line says it all. Others
    # that got a command too keep their reason (im-restart patches a busy IM's condition).
    pending = {(c.target.kind, c.target.namespace, c.target.name) for c in commands}
    explanations = [
        e
        for e in decider.explain()
        if (e.kind, e.namespace, e.name) not in pending or e.reason != COMMAND_PENDING
    ]
    return commands, explanations
