"""Kubernetes Events on the two upgrade CRs, so an operator with only `kubectl describe lhum,lhnu`
(or `kubectl get events`) follows the upgrade: a node started, each step, a volume blocking the
node, an attempt failed and retried, an abort and why, the end with its summary.

One Event per transition, never one per decision pass: an Event is made when the view sees a CR's
status move (the old object against the new one), whoever wrote it. A fresh decider (a restart,
a new leader) starts from what it lists and has nothing to compare, so it never repeats what its
predecessor reported; nothing is announced before the view is bootstrapped. The Events are the
kit's Event commands (corral_decision.events): the actuator records them, and the same report
again on the same CR counts on the existing Event, as Kubernetes' event recorder does.

Warning for what needs an operator's eye (a failure, a block, an abort, a retry), Normal for the
rest. Only the CRs are involved objects: the policy lets v2-upgrade record Events about corral's
group and nothing else.
"""

from __future__ import annotations

from collections import deque

from corral_decision.events import EventType, event_command
from corral_model import longhorn as lh
from corral_model.envelopes import Command, Target
from corral_v2_upgrade.commands import MANAGER_KIND, NODE_UPGRADE_KIND, SERVICE
from corral_v2_upgrade.node import is_volume_blocker
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import abort_requested

S = UpgradeState
NORMAL, WARNING = EventType.NORMAL, EventType.WARNING

OUTBOX_LIMIT = 1024
"""Events made but not yet taken by `decide()`. A standby (which never decides) keeps only the
latest; a replica that becomes leader starts from an empty outbox (its predecessor reported)."""


class Announcer:
    """Turns the CRs' transitions into Event commands, held until the next `decide()`."""

    def __init__(self) -> None:
        self.outbox: deque[Command] = deque(maxlen=OUTBOX_LIMIT)

    def take(self) -> list[Command]:
        commands = list(self.outbox)
        self.outbox.clear()
        return commands

    # --- the manager ----------------------------------------------------------------------------------

    def manager_moved(
        self, old: lh.DataEngineUpgradeManager, new: lh.DataEngineUpgradeManager, now: float
    ) -> None:
        before, after = old.status, new.status
        if after.state != before.state:
            if after.state == S.COMPLETED:
                failed = any(e.state == S.ERROR for e in after.upgrade_nodes.values())
                summary = after.message or f"{after.progress} nodes upgraded"
                self._emit(new, WARNING if failed else NORMAL, "UpgradeCompleted", summary, now)
            elif after.state == S.ERROR:
                reason = "Aborted" if abort_requested(new) else "UpgradeFailed"
                self._emit(new, WARNING, reason, after.message or "failed", now)
            else:
                self._state_changed(new, before.state, after.state, now)
        was_image, image = before.instance_manager_image, after.instance_manager_image
        if was_image and image != was_image:
            changed = f"target image changed from {was_image} to {image}"
            self._emit(new, NORMAL, "TargetImageChanged", changed, now)
        node = after.upgrading_node
        if node and node != before.upgrading_node:
            attempt = after.upgrade_nodes.get(node, lh.UpgradeNodeStatus()).attempts + 1
            self._emit(
                new,
                NORMAL,
                "NodeUpgradeStarted",
                f"node {node}: upgrade to {after.instance_manager_image} started (attempt {attempt})",
                now,
            )
        for name, entry in sorted(after.upgrade_nodes.items()):
            was = before.upgrade_nodes.get(name)
            if was is not None and was != entry:
                self._node_entry_moved(new, name, was, entry, now)

    def _node_entry_moved(
        self,
        manager: lh.DataEngineUpgradeManager,
        node: str,
        was: lh.UpgradeNodeStatus,
        entry: lh.UpgradeNodeStatus,
        now: float,
    ) -> None:
        if entry.state == S.ERROR and was.state != S.ERROR:
            self._emit(manager, WARNING, "NodeUpgradeFailed", f"node {node}: {entry.message}", now)
        elif entry.retries > was.retries:
            self._emit(
                manager,
                WARNING,
                "NodeUpgradeRetried",
                f"node {node}: {entry.message} (failed attempts: {entry.retries})",
                now,
            )
        elif entry.state == S.COMPLETED and was.state != S.COMPLETED:
            self._emit(manager, NORMAL, "NodeUpgradeCompleted", f"node {node}: upgraded", now)
        elif entry.state == S.PENDING and was.state != S.PENDING:
            # Back in the queue without a retry used: a new target image, or its node upgrade gone.
            self._emit(manager, NORMAL, "NodeUpgradeRequeued", f"node {node}: {entry.message}", now)

    # --- a node upgrade ---------------------------------------------------------------------------------

    def node_upgrade_moved(
        self, old: lh.NodeDataEngineUpgrade, new: lh.NodeDataEngineUpgrade, now: float
    ) -> None:
        before, after = old.status, new.status
        node = new.spec.node_id
        if after.abort_reason and not before.abort_reason:
            restoring = "" if after.state in (S.COMPLETED, S.ERROR) else f"; {after.state} to restore"
            self._emit(new, WARNING, "Aborted", f"node {node}: {after.message}{restoring}", now)
        elif after.state != before.state:
            if after.state == S.ERROR:
                self._emit(
                    new, WARNING, "NodeUpgradeFailed", f"node {node}: {after.message or 'failed'}", now
                )
            elif after.state == S.COMPLETED:
                self._emit(
                    new,
                    NORMAL,
                    "NodeUpgradeCompleted",
                    f"node {node}: instance manager upgraded to {new.spec.instance_manager_image};"
                    f" volumes {after.progress or '0/0'}",
                    now,
                )
            else:
                self._state_changed(new, before.state, after.state, now)
        if after.message != before.message and is_volume_blocker(after.message):
            self._emit(new, WARNING, "VolumeBlocked", after.message, now)
        for name, entry in sorted(after.volumes.items()):
            was = before.volumes.get(name)
            if entry.state == S.ERROR and (was is None or was.state != S.ERROR):
                self._emit(new, WARNING, "VolumeUpgradeFailed", f"volume {name}: {entry.message}", now)

    # --- shared -------------------------------------------------------------------------------------------

    def _state_changed(
        self, about: lh.DataEngineUpgradeManager | lh.NodeDataEngineUpgrade, old: str, new: str, now: float
    ) -> None:
        self._emit(about, NORMAL, "StateChanged", f"state {old or 'undefined'} -> {new}", now)

    def _emit(
        self,
        about: lh.DataEngineUpgradeManager | lh.NodeDataEngineUpgrade,
        type_: EventType,
        reason: str,
        message: str,
        now: float,
    ) -> None:
        meta = about.metadata
        kind = MANAGER_KIND if isinstance(about, lh.DataEngineUpgradeManager) else NODE_UPGRADE_KIND
        target = Target(kind=kind, namespace=meta.namespace, name=meta.name, uid=meta.uid)
        self.outbox.append(
            event_command(service=SERVICE, about=target, type_=type_, reason=reason, message=message, now=now)
        )
