"""The v2-upgrade scenarios' invariants, judged write by write (issue 15, "Must show").

A pure checker: it is fed every write the API server commits to the kinds it cares about, as
`Write(plural, operation, old, new)`, keeps its own copy of the upgrade CRs and instance managers,
and records a violation the moment a write breaks a rule. The live scenarios feed it from admission
hooks inside the API server (observer.py), so nothing slips between two polls; the mutation tests
feed it recorded bad histories to show every rule can fail.

The rules:

* **One node in flight.** After every write, at most one NodeDataEngineUpgrade is not in
  {completed, error}, cluster-wide.
* **… and it is the manager's `status.upgradingNode`.** For the unfinished node upgrade `u` of
  manager `m`, `m.status.upgradingNode == u.spec.nodeID`, with one exception, the *adoption
  window* the service's README describes: the decider creates `u` first and records it in the
  manager's status in a later write. The window opens at `u`'s create (when `upgradingNode` is
  empty then) and closes at the first manager write that sets `upgradingNode`; inside it:
  - `upgradingNode` stays empty (never another node);
  - the manager may rewrite its `message` (a pass decided before it saw `u`), but a write that
    changes its node bookkeeping (`state`, `upgradeNodes`) without naming `u`'s node is a
    violation, and so is `u` finishing before its manager named it (the manager would never
    learn how its node ended).
  A node upgrade created while the manager names *another* node in flight is a violation, and so is
  an unfinished node upgrade whose manager is finished. `upgradingNode` naming a node whose
  upgrade has already ended (or was deleted) is allowed: the manager records the end in its next
  write.
* **No attached v2 volume is detached.** A v2 volume whose `status.state` is `attached` never
  leaves it while `spec.nodeID` still asks for it (an operator's own detach clears `spec.nodeID`
  first and is allowed).
* **v1 is untouched** from the first manager's creation on: no v1 volume's spec or state
  changes, no v1 replica is failed, stopped or deleted, and no v1 instance manager serving an
  engine or replica is deleted, nor its pod deleted or restarted (uid and container `restartCount`
  stay). An *idle* v1 IM on the old image may go: Longhorn's IM controller removes those once the
  default image changes (IM-08), which is not the upgrade's doing.

The I/O-gap rule reads the simulator's SIM-IO ledger instead of writes: `io_gap_violations`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
TERMINAL = frozenset({"completed", "error"})
MANAGERS = "dataengineupgrademanagers"
NODE_UPGRADES = "nodedataengineupgrades"
IM_COMPONENT = "instance-manager"


@dataclass(frozen=True)
class Write:
    """One committed write: `operation` CREATE, UPDATE or DELETE; `old`/`new` None where absent."""

    plural: str
    operation: str
    old: Obj | None
    new: Obj | None

    @property
    def name(self) -> str:
        obj = self.new if self.new is not None else self.old
        return str((obj or {}).get("metadata", {}).get("name", ""))


def _status(obj: Obj | None) -> Obj:
    return (obj or {}).get("status") or {}


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def _engine(obj: Obj | None) -> str:
    return str(_spec(obj).get("dataEngine") or "v1")


def _gone(write: Write) -> bool:
    """The object leaves the store: a delete of one no finalizer holds (one that a finalizer holds
    is only marked, and stays until it comes off), or the last finalizer removed from a deleted one."""
    if write.operation == "DELETE" or write.new is None:
        return not (write.old or {}).get("metadata", {}).get("finalizers")
    meta = write.new.get("metadata", {})
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


def serving(im: Obj | None) -> bool:
    """The IM holds an engine or replica process (whatever its state)."""
    status = _status(im)
    return any(status.get(f) for f in ("instanceEngines", "instanceReplicas", "instances"))


def restart_count(pod: Obj | None) -> int:
    statuses = _status(pod).get("containerStatuses") or []
    return int(statuses[0].get("restartCount", 0) or 0) if statuses else 0


class UpgradeInvariants:
    """Judges each write in turn; `violations` lists every rule broken, with the write that broke it."""

    def __init__(self, existing: Mapping[str, Iterable[Obj]] | None = None) -> None:
        """`existing`: plural → the objects already stored when judging starts (managers, node
        upgrades, instance managers)."""
        self.violations: list[str] = []
        self.objects: dict[str, dict[str, Obj]] = {MANAGERS: {}, NODE_UPGRADES: {}, "instancemanagers": {}}
        for plural, objs in (existing or {}).items():
            for obj in objs:
                self.objects.setdefault(plural, {})[obj["metadata"]["name"]] = obj
        self.adopting: dict[str, str] = {}
        """manager → the node upgrade it created and has not named in `upgradingNode` yet."""
        self.v1_guarded = bool(self.objects[MANAGERS])
        self.writes = 0

    # --- input -------------------------------------------------------------------------------------

    def observe(self, write: Write) -> None:
        self.writes += 1
        judge = {
            MANAGERS: self._manager,
            NODE_UPGRADES: self._node_upgrade,
            "volumes": self._volume,
            "replicas": self._replica,
            "instancemanagers": self._instance_manager,
            "pods": self._pod,
        }.get(write.plural)
        if judge is not None:
            judge(write)
        if write.plural in self.objects:
            table = self.objects[write.plural]
            if _gone(write):
                table.pop(write.name, None)
            elif write.new is not None:  # (none: a delete that only marks it; it stays as it was)
                table[write.name] = write.new
        if write.plural in (MANAGERS, NODE_UPGRADES):
            self._one_in_flight(write)

    def observe_all(self, writes: Iterable[Write]) -> list[str]:
        for write in writes:
            self.observe(write)
        return self.violations

    def _violation(self, write: Write, what: str) -> None:
        self.violations.append(f"write {self.writes} ({write.operation} {write.plural}/{write.name}): {what}")

    # --- one node in flight, named by the manager --------------------------------------------------------

    def _manager(self, write: Write) -> None:
        if write.operation == "CREATE":
            self.v1_guarded = True
        waiting = self.adopting.get(write.name)
        if waiting is None or write.new is None:
            return
        node = str(_spec(self.objects[NODE_UPGRADES].get(waiting)).get("nodeID", ""))
        named = str(_status(write.new).get("upgradingNode") or "")
        if named == node:
            del self.adopting[write.name]
            return
        if named:
            self._violation(write, f"names {named} in flight while its node upgrade {waiting} is of {node}")
            del self.adopting[write.name]
            return
        old, new = _status(write.old), _status(write.new)
        for field in ("state", "upgradeNodes"):
            if old.get(field) != new.get(field):
                self._violation(
                    write,
                    f"changed {field} without naming {node}, whose node upgrade {waiting} it created",
                )
                del self.adopting[write.name]
                return

    def _node_upgrade(self, write: Write) -> None:
        owner = str(_spec(write.new or write.old).get("dataEngineUpgradeManager", ""))
        manager = self.objects[MANAGERS].get(owner)
        if write.operation == "CREATE" and write.new is not None:
            named = str(_status(manager).get("upgradingNode") or "")
            node = str(_spec(write.new).get("nodeID", ""))
            if named and named != node:
                self._violation(write, f"created for {node} while manager {owner} names {named} in flight")
            elif not named:
                self.adopting[owner] = write.name
        if (
            self.adopting.get(owner) == write.name
            and str(_status(write.new).get("state", "")) in TERMINAL
            and str(_status(write.old).get("state", "")) not in TERMINAL
        ):
            self._violation(write, f"ended before manager {owner} named its node in upgradingNode")
            del self.adopting[owner]

    def _one_in_flight(self, write: Write) -> None:
        unfinished = [
            u
            for u in self.objects[NODE_UPGRADES].values()
            if str(_status(u).get("state", "")) not in TERMINAL
        ]
        if len(unfinished) > 1:
            names = sorted(f"{u['metadata']['name']} ({_status(u).get('state', '')})" for u in unfinished)
            self._violation(write, f"{len(unfinished)} node upgrades in flight: {', '.join(names)}")
        for upgrade in unfinished:
            name = upgrade["metadata"]["name"]
            owner = str(_spec(upgrade).get("dataEngineUpgradeManager", ""))
            node = str(_spec(upgrade).get("nodeID", ""))
            manager = self.objects[MANAGERS].get(owner)
            if manager is None:
                continue  # a manager deleted with its node upgrade still there: nothing to compare
            named = str(_status(manager).get("upgradingNode") or "")
            state = str(_status(manager).get("state", ""))
            if state in TERMINAL:
                self._violation(write, f"node upgrade {name} unfinished while manager {owner} is {state}")
            elif named != node and not (named == "" and self.adopting.get(owner) == name):
                self._violation(
                    write, f"node upgrade {name} of {node} in flight, manager {owner} names {named or 'none'}"
                )

    # --- no attached v2 volume detached ----------------------------------------------------------------

    def _volume(self, write: Write) -> None:
        old, new = write.old, write.new
        if old is None or new is None:
            return
        was, now = _status(old).get("state"), _status(new).get("state")
        if _engine(old) == "v2":
            if was == "attached" and now != "attached" and _spec(new).get("nodeID"):
                self._violation(
                    write, f"attached v2 volume went {now} while asked onto {_spec(new)['nodeID']}"
                )
            return
        if not self.v1_guarded:
            return
        if _spec(old) != _spec(new):
            changed = sorted(k for k in {*_spec(old), *_spec(new)} if _spec(old).get(k) != _spec(new).get(k))
            self._violation(write, f"v1 volume's spec changed: {changed}")
        if was != now:
            self._violation(write, f"v1 volume went {was} -> {now}")

    # --- v1 untouched -------------------------------------------------------------------------------------

    def _replica(self, write: Write) -> None:
        if not self.v1_guarded or _engine(write.old) != "v1" or write.old is None:
            return
        if _gone(write):
            self._violation(write, "v1 replica deleted")
            return
        for field in ("desireState", "failedAt"):
            if _spec(write.old).get(field) != _spec(write.new).get(field):
                was, now = _spec(write.old).get(field), _spec(write.new).get(field)
                self._violation(write, f"v1 replica's {field} {was!r} -> {now!r}")

    def _instance_manager(self, write: Write) -> None:
        if (
            self.v1_guarded
            and write.operation == "DELETE"
            and _engine(write.old) == "v1"
            and serving(write.old)
        ):
            self._violation(write, "v1 instance manager deleted while serving")

    def _pod(self, write: Write) -> None:
        old = write.old
        if not self.v1_guarded or old is None:
            return
        labels = old.get("metadata", {}).get("labels") or {}
        if labels.get("longhorn.io/component") != IM_COMPONENT:
            return
        im = self.objects["instancemanagers"].get(write.name)
        if im is None or _engine(im) != "v1" or not serving(im):
            return
        if write.operation == "DELETE":
            self._violation(write, f"pod of v1 instance manager deleted (uid {old['metadata'].get('uid')})")
        elif restart_count(write.new) > restart_count(old):
            counts = f"{restart_count(old)} -> {restart_count(write.new)}"
            self._violation(write, f"v1 instance manager's container restarted ({counts})")


def io_gap_violations(gaps: Mapping[str, Iterable[float]], budget: float) -> list[str]:
    """Every volume whose SIM-IO ledger holds an interval of no service as long as `budget` or longer."""
    out = []
    for volume, seconds in sorted(gaps.items()):
        longest = max(seconds, default=0.0)
        if longest >= budget:
            out.append(f"volume {volume} could not serve for {longest:.3f}s (budget {budget:.3f}s)")
    return out
