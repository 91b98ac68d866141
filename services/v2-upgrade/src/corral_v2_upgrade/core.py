"""The v2-upgrade decider: both state machines of longhorn-behaviour.md §5.5 as a
`corral_decision.Decider`. Pure: no I/O, injected clock.

* `apply(event)` folds an event into the view (view.py); any change may move a machine, so the
  next `decide()` steps every unfinished CR (a few: one manager, one node upgrade in flight), each
  at O(what sits on its node) through the view's indexes;
* `decide()` runs manager.py and node.py over each unfinished CR and returns, per CR, at most one
  guarded status patch, plus the writes its step needs on other objects;
* a command is an expectation until the view shows its target at a fresher resourceVersion
  (created, patched, deleted or marked for deletion), a refusal comes back, or its TTL passes; no
  second command goes to a target meanwhile. A refused target waits for a fresher object (or
  `retry_backoff`) before the same command is sent again.
* Events on the CRs (announce.py) are made in `apply`, when the view sees a CR's status move, and
  handed out by the next `decide()`; they are no expectation (the kit never reports them back).

Nothing the machines need lives here: the CRs' status holds it all, so a new decider (restart,
new leader) resumes from the objects alone. The expectations only stop a lagging view from
repeating a write; a lost one is repeated safely, because every write is guarded.
"""

from __future__ import annotations

from typing import Any

from corral_decision.base import DeciderBase, TargetKey, key_of
from corral_decision.decider import Clock, Explanation, InvalidEvent
from corral_decision.kit import tested_version
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent, Verb
from corral_model.kinds import KINDS
from corral_v2_upgrade.announce import Announcer
from corral_v2_upgrade.commands import MANAGER_KIND, NODE_UPGRADE_KIND, SERVICE, patch_status
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.manager import step_manager
from corral_v2_upgrade.node import lists_leaving, step_node
from corral_v2_upgrade.plan import node_plan
from corral_v2_upgrade.states import is_terminal
from corral_v2_upgrade.step import Step
from corral_v2_upgrade.view import UpgradeView

READS: dict[str, type[Any]] = {
    "dataengineupgrademanager": lh.DataEngineUpgradeManager,
    "nodedataengineupgrade": lh.NodeDataEngineUpgrade,
    "node": lh.Node,
    "kubenode": lh.KubeNode,
    "volume": lh.Volume,
    "engine": lh.Engine,
    "replica": lh.Replica,
    "instancemanager": lh.InstanceManager,
    "setting": lh.Setting,
    "snapshot": lh.Snapshot,
}
COMMANDS = frozenset(
    {"dataengineupgrademanager", "nodedataengineupgrade", "volume", "replica", "instancemanager", "snapshot"}
)
NODE_JUDGED = frozenset({"InstanceManager", "Replica"})
"""Targets on a node whose writes are judged on that node's fitness as well as on themselves."""


class V2UpgradeDecider(DeciderBase):
    def __init__(self, clock: Clock, config: DeciderConfig | None = None) -> None:
        self.config = config or DeciderConfig()
        super().__init__(clock, reads=READS, timing=self.config.timing, service=SERVICE)
        self.view = UpgradeView()
        self._steps: dict[TargetKey, Step] = {}
        self._announcer = Announcer()

    # --- input ------------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> None:
        struct = READS.get(event.kind)
        if struct is None:
            raise InvalidEvent(f"{SERVICE} does not read {event.kind!r}")
        if event.type is EventType.UNREADABLE:
            return  # keep the last state: older, not wrong
        if event.type not in (EventType.RESYNCED, EventType.DELETED) and not isinstance(event.object, struct):
            raise InvalidEvent(f"{event.kind} {event.namespace}/{event.name} carries no {struct.__name__}")
        key = self.observe(event)
        if key is None:
            return
        before = self.view.get(event.kind, event.name)
        self.view.put(event.kind, event.name, None if event.type is EventType.DELETED else event.object)
        if before is not None and event.type is not EventType.DELETED:
            self._announce(before, event.object)
        # A write shows as a fresher object (created, patched, deleted), a delete also as a mark.
        deleting = event.object is not None and bool(event.object.metadata.deletion_timestamp)
        self.settle_if_fresher(key, gone=deleting)

    def may_adopt(self, command: Command) -> bool:
        """Only a command that can still apply on this view, and whose effect it does not show yet
        (an adopted command holds its target until the view moves past it)."""
        key = key_of(command.target)
        version = self.versions.get(key)
        if command.verb is Verb.CREATE:
            return version is None
        if version is None:
            return False  # gone: a delete is done, a patch cannot apply
        if command.verb is Verb.DELETE:
            obj = self._object(command.target.kind, command.target.name)
            return obj is not None and not obj.metadata.deletion_timestamp
        return version <= tested_version(command)

    def judged_version(self, key: TargetKey) -> int | None:
        """An instance manager or replica is acted on only while its node is fit (node_guard.py),
        and the actuator refuses its delete while the node is not Ready: such a refusal is judged
        again as soon as the node (Longhorn's or Kubernetes') changes, not after the retry backoff."""
        own = self.version_at(key)
        if key[0] not in NODE_JUDGED:
            return own
        obj = self._object(key[0], key[2])
        node = getattr(getattr(obj, "spec", None), "node_id", "") if obj is not None else ""
        if not node:
            return own
        versions = (own, self.versions.get(("Node", key[1], node)), self.versions.get(("Node", "", node)))
        return max((v for v in versions if v is not None), default=None)

    # --- output -----------------------------------------------------------------------------------

    def reconcile(self, now: float) -> list[Command]:
        """Every unfinished CR steps; nothing is kept between passes but the CRs' status, so a
        target freed or due needs no note of its own (`look_again`)."""
        view, config = self.view, self.config
        out: list[Command] = []
        self._steps = {}
        starting = any(
            p.target.kind == NODE_UPGRADE_KIND and p.target.name not in view.node_upgrades
            for p in self.expectations()
        )
        for name in sorted(view.managers):
            manager = view.managers[name]
            if is_terminal(manager.status.state):
                continue
            step = step_manager(view, manager, config, now, starting)
            self._steps[(MANAGER_KIND, manager.metadata.namespace, name)] = step
            if any(c.verb is Verb.CREATE and c.target.kind == NODE_UPGRADE_KIND for c in step.actions):
                starting = True
            self._emit(MANAGER_KIND, manager, step, now, out)
        for name in sorted(view.node_upgrades):
            node_upgrade = view.node_upgrades[name]
            if is_terminal(node_upgrade.status.state) and not self._still_to_tidy(node_upgrade):
                continue
            step = step_node(view, node_upgrade, config, now)
            self._steps[(NODE_UPGRADE_KIND, node_upgrade.metadata.namespace, name)] = step
            self._emit(NODE_UPGRADE_KIND, node_upgrade, step, now, out)
        out.extend(self._announcer.take())
        return out

    def reconsider_all(self) -> None:
        """A replica that just became leader: its predecessor reported the transitions so far."""
        self._announcer.outbox.clear()

    def explain(self, key: str | None = None) -> list[Explanation]:
        """Per CR: its state, and what it waits for."""
        out = []
        view = self.view
        for kind, table in ((MANAGER_KIND, view.managers), (NODE_UPGRADE_KIND, view.node_upgrades)):
            for name in sorted(table):
                obj = table[name]
                explanation = Explanation(
                    kind=kind,
                    namespace=obj.metadata.namespace,
                    name=name,
                    reason=obj.status.state or "undefined",
                    group=obj.spec.node_id
                    if isinstance(obj, lh.NodeDataEngineUpgrade)
                    else obj.status.upgrading_node,
                    detail=obj.status.message,
                )
                if key is None or explanation.key == key:
                    out.append(explanation)
                if isinstance(obj, lh.DataEngineUpgradeManager) and not is_terminal(obj.status.state):
                    out.extend(e for e in node_plan(view, obj) if key is None or e.key == key)
        return out

    # --- internals ----------------------------------------------------------------------------------

    def _announce(self, before: Any, after: Any) -> None:
        """An Event per transition of a CR's status (announce.py), once the view is bootstrapped."""
        if not (self.config.events and self.ready):
            return
        if isinstance(after, lh.DataEngineUpgradeManager):
            self._announcer.manager_moved(before, after, self.clock())
        elif isinstance(after, lh.NodeDataEngineUpgrade):
            self._announcer.node_upgrade_moved(before, after, self.clock())

    def _still_to_tidy(self, node_upgrade: lh.NodeDataEngineUpgrade) -> bool:
        """An ended node upgrade with something left for v2-upgrade: deleted, with its finalizer
        to let go of; or, while its manager runs, listing a volume deleted as it ended."""
        if node_upgrade.metadata.deletion_timestamp:
            return True
        manager = self.view.managers.get(node_upgrade.spec.data_engine_upgrade_manager)
        return (
            manager is not None
            and not is_terminal(manager.status.state)
            and lists_leaving(self.view, node_upgrade)
        )

    def _object(self, kind: str, name: str) -> Any:
        token = next((t for t in READS if KINDS[t].kind == kind and KINDS[t].group != ""), None)
        return self.view.get(token, name) if token is not None else None

    def _emit(
        self,
        kind: str,
        obj: lh.DataEngineUpgradeManager | lh.NodeDataEngineUpgrade,
        step: Step,
        now: float,
        out: list[Command],
    ) -> None:
        if step.wake is not None:
            self.ask_again(step.wake, (kind, obj.metadata.namespace, obj.metadata.name))
        commands = list(step.actions)
        if step.status:
            commands.append(patch_status(kind, obj, step.status, now))
        for command in commands:
            key = key_of(command.target)
            if not self.may_send(key, now) or any(key_of(c.target) == key for c in out):
                continue
            out.append(self.issue(command, key))
