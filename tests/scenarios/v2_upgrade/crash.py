"""kill -9 of the v2-upgrade service the instant one of its machines reaches a state, and the
tally of the writes a restart must never repeat.

The service runs as its own process (`python -m corral_v2_upgrade`, tests/chaos/stack.py's
`Replica`), because only a real process dies without releasing its lease, flushing its bus client
or finishing the pass it was in. The kill is fired *inside the API server*: an admission hook that
never refuses anything sees the write that moves a DataEngineUpgradeManager or NodeDataEngineUpgrade
into the state and sends SIGKILL before that write is even committed, so the service dies knowing
nothing of the state it reached (what a poll, arriving a pass or two later, could not arrange).

`WriteTally` counts, also inside the API server, the writes that must happen once per node or per
volume however often the service restarts: NodeDataEngineUpgrade creates per node (a second one is
a second node started, or the same node started twice), Snapshot creates per (node upgrade,
volume), and v2 instance-manager deletes per node (a delete of an IM already terminating changes
nothing and is not counted, as the API server does not count it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral_sandbox.emulator import Emulator
from corral_v2_upgrade.view import FOR_UPGRADE_LABEL
from tests.chaos.stack import BusSettings, Replica, settings

CORRAL = "corral.longhorn.io"
LONGHORN = "longhorn.io"
PLURALS = {"manager": "dataengineupgrademanagers", "node": "nodedataengineupgrades"}

Obj = dict[str, Any]


def _status_field(obj: Obj | None, field: str) -> str | None:
    """The object's `status.<field>` ("" for none yet); None when there is no object."""
    if obj is None:
        return None
    return str((obj.get("status") or {}).get(field) or "")


def v2_upgrade_process(
    kubeconfig: str, nats_url: str, log_dir: Path, instance: str = "v2u-1", **overrides: Any
) -> Replica:
    """The v2-upgrade service as a process, configured as the chaos suite configures its deciders
    plus `overrides` (its `CORRAL_*` settings by field name: `snapshot_before_upgrade`,
    `node_timeout_s`, …)."""
    values = {**settings("v2-upgrade", instance, kubeconfig, BusSettings(nats_url)), **overrides}
    return Replica(values, log_dir)


class StateTrap:
    """Calls `spring` once, the first time a write puts a `machine` ("manager" or "node") CR into
    `state`. State "" is the CR's creation (nothing decided on it yet). `field` traps another
    status field instead (`abortReason`: an abort starting); `nth` waits for the nth CR to get
    there (a node's second attempt)."""

    def __init__(
        self,
        emulator: Emulator,
        machine: str,
        state: str,
        spring: Callable[[str], None],
        field: str = "state",
        nth: int = 1,
    ) -> None:
        self.machine, self.state, self.spring, self.field, self.nth = machine, state, spring, field, nth
        self.seen: list[str] = []
        """The CRs that reached the state, in order (each once)."""
        self.caught = ""
        """The name of the nth CR that reached the state, once it did."""
        emulator.register_admission(
            CORRAL, PLURALS[machine], self._write, name=f"trap.{machine}", include_status=True
        )

    def _write(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        value = _status_field(new, self.field)
        if self.caught or new is None or value != self.state or _status_field(old, self.field) == value:
            return
        name = str(new["metadata"]["name"])
        if name in self.seen:
            return
        self.seen.append(name)
        if len(self.seen) == self.nth:
            self.caught = name
            self.spring(name)


class WriteTally:
    """The writes a restarted service must not repeat, counted as the API server takes them."""

    def __init__(self, emulator: Emulator) -> None:
        self.node_upgrades: Counter[str] = Counter()
        """node → NodeDataEngineUpgrades created for it."""
        self.snapshots: Counter[tuple[str, str]] = Counter()
        """(node upgrade, volume) → snapshots created for it."""
        self.im_deletes: Counter[str] = Counter()
        """node → v2 instance managers deleted on it (not counting deletes of one already going)."""
        emulator.register_admission(CORRAL, PLURALS["node"], self._node_upgrade, name="tally.node")
        emulator.register_admission(LONGHORN, "snapshots", self._snapshot, name="tally.snapshot")
        emulator.register_admission(LONGHORN, "instancemanagers", self._im, name="tally.im")

    def _node_upgrade(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        if operation == "CREATE" and new is not None:
            self.node_upgrades[str(new["spec"].get("nodeID", ""))] += 1

    def _snapshot(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        if operation == "CREATE" and new is not None:
            labels = new["metadata"].get("labels") or {}
            self.snapshots[(str(labels.get(FOR_UPGRADE_LABEL, "")), str(new["spec"].get("volume", "")))] += 1

    def _im(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        # The API server calls a DELETE's hooks once its preconditions held, so each call commits.
        if operation != "DELETE" or old is None or old["metadata"].get("deletionTimestamp"):
            return
        if old["spec"].get("dataEngine") == "v2":
            self.im_deletes[str(old["spec"].get("nodeID", ""))] += 1

    def repeated(self) -> list[str]:
        """Every write made more than once, described; empty when none was."""
        found = [
            f"{n} NodeDataEngineUpgrades created for {node}"
            for node, n in self.node_upgrades.items()
            if n > 1
        ]
        found += [f"{n} snapshots of {v} for {u}" for (u, v), n in self.snapshots.items() if n > 1]
        found += [f"{n} v2 IM deletes on {node}" for node, n in self.im_deletes.items() if n > 1]
        return sorted(found)
