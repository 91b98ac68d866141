"""`corral plan engine-upgrade`: what the decider would do on a snapshot of a cluster.

Registered as the `engine-upgrade` entry of the `corral.plan` entry-point group; the CLI reads
the file and prints. Exposed separately so tests can call it without a subprocess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral_engine_upgrade.core import EngineUpgradeDecider, Explanation
from corral_engine_upgrade.snapshot import snapshot_events
from corral_model.envelopes import Command


def plan_snapshot(document: Mapping[str, Any], now: float) -> tuple[list[Command], list[Explanation]]:
    """Bootstrap a decider from the snapshot at time `now`; return its first wave and why the rest
    of the volumes were not chosen."""
    decider = EngineUpgradeDecider(clock=lambda: now)
    decider.apply_all(snapshot_events(document))
    commands = decider.decide()
    return commands, decider.explain()
