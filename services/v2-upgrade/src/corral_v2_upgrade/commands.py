"""The writes v2-upgrade asks the actuator for, each guarded by what the step that chose it read.

* A CR's status (manager or node upgrade): on the resourceVersion read and, once it has one, the
  state read, so a decision taken on a stale view is refused instead of undoing a newer step.
* A volume's `spec.image` / `spec.targetNodeIDForLiveUpgrade`: on the resourceVersion read and on
  `spec.dataEngine: v2` (these fields may be absent or empty on real objects, so the version is
  the guard that always exists).
* Failing a replica (`desireState: stopped`, `failedAt`) and deleting it: a v2 replica on the
  upgrading node only, at the version (patch) or uid (delete) read.
* Deleting an old instance manager: v2, on that node, still on the old image, this very uid; and
  its Longhorn node as the step read it (uid, resourceVersion: fit, node_guard.py), so a delete
  decided before the node changed is refused, and the one decided after it is a new command (a
  new id: never dropped by LH_COMMANDS' dedup window as a repeat of the refused one).
* Creating a NodeDataEngineUpgrade or a Snapshot: whole objects with deterministic names, so a
  repeated create is the same object (the actuator treats an existing match as applied). A node
  upgrade carries v2-upgrade's finalizer (Longhorn's webhook gives its own `longhorn.io`, §5.2):
  deleted mid-flight it stays, and so does its node's `DataEngineUpgradeRequested`, until the
  service has brought the node's volumes home and lets it go (`release_node_upgrade`, on the
  resourceVersion read).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from corral_model import longhorn as lh
from corral_model.envelopes import Command, FieldValue, RelatedPrecondition, Target, Verb, new_command
from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION, LONGHORN_GROUP, LONGHORN_VERSION
from corral_v2_upgrade.view import FOR_UPGRADE_LABEL, V2

SERVICE = "v2-upgrade"
MANAGER_KIND = "DataEngineUpgradeManager"
NODE_UPGRADE_KIND = "NodeDataEngineUpgrade"
COMPONENT_LABEL = "longhorn.io/component"
MANAGER_LABEL = "longhorn.io/data-engine-upgrade-manager"
NODE_LABEL = "longhorn.io/node"
RV = "/metadata/resourceVersion"
V2_ENGINE = FieldValue(path="/spec/dataEngine", value=V2)
NODE_UPGRADE_FINALIZER = "corral.longhorn.io/node-upgrade"
"""Held on every NodeDataEngineUpgrade v2-upgrade creates, until a deleted one lets its node go."""


def rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def short_hash(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def _target(obj: Any, kind: str, with_uid: bool = False) -> Target:
    meta: lh.ObjectMeta = obj.metadata
    return Target(kind=kind, namespace=meta.namespace, name=meta.name, uid=meta.uid if with_uid else "")


def patch_status(
    kind: str,
    obj: lh.DataEngineUpgradeManager | lh.NodeDataEngineUpgrade,
    changes: Mapping[str, Any],
    now: float,
) -> Command:
    """Set the given status fields (camelCase names) of a manager or node upgrade."""
    meta, state = obj.metadata, str(obj.status.state)
    fields: dict[str, Any] = msgspec.to_builtins(dict(changes))  # JSON values: a state is a str, not an enum
    if fields.get("state", state) != state:
        fields["stateSince"] = rfc3339(now)
    if isinstance(obj, lh.NodeDataEngineUpgrade) and isinstance(fields.get("volumes"), dict):
        fields["volumes"] = volumes_since(obj.status.volumes, fields["volumes"], now)
    tests = [FieldValue(path=RV, value=meta.resource_version)]
    if state:
        tests.append(FieldValue(path="/status/state", value=state))
    new_state = fields.get("state", state)
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH_STATUS,
        target=_target(obj, kind),
        changes=tuple(FieldValue(path=f"/status/{k}", value=v) for k, v in sorted(fields.items())),
        preconditions=tuple(tests),
        reason=f"{state or 'undefined'} -> {new_state}" if new_state != state else f"{state}: status",
        created_at=now,
    )


def volumes_since(
    before: Mapping[str, lh.VolumeUpgradeStatus], volumes: dict[str, Any], now: float
) -> dict[str, Any]:
    """Each volume entry of a node upgrade's status with its `since`: now for a volume whose state
    this write changes (or that it lists first), else the time its state last changed. Written in
    the same patch as the state, so the time in state survives a restart as the state does."""
    stamp = rfc3339(now)
    out: dict[str, Any] = {}
    for name, entry in volumes.items():
        old = before.get(name)
        entry = dict(entry)
        if old is None or old.state != entry.get("state", ""):
            entry["since"] = stamp
        elif old.since:
            entry["since"] = old.since
        out[name] = entry
    return out


def patch_volume(
    volume: lh.Volume, image: str | None, target_node: str | None, why: str, now: float
) -> Command:
    changes = []
    if image is not None:
        changes.append(FieldValue(path="/spec/image", value=image))
    if target_node is not None:
        changes.append(FieldValue(path="/spec/targetNodeIDForLiveUpgrade", value=target_node))
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH,
        target=_target(volume, "Volume"),
        changes=tuple(changes),
        preconditions=(FieldValue(path=RV, value=volume.metadata.resource_version), V2_ENGINE),
        reason=why,
        created_at=now,
    )


def fail_replica(replica: lh.Replica, now: float) -> Command:
    stamp = rfc3339(now)
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH,
        target=_target(replica, "Replica"),
        changes=(
            FieldValue(path="/spec/desireState", value="stopped"),
            FieldValue(path="/spec/failedAt", value=stamp),
            FieldValue(path="/spec/lastFailedAt", value=stamp),
        ),
        preconditions=(
            FieldValue(path=RV, value=replica.metadata.resource_version),
            V2_ENGINE,
            FieldValue(path="/spec/nodeID", value=replica.spec.node_id),
        ),
        reason=f"failing-replicas: stop v2 replica on upgrading node {replica.spec.node_id}",
        created_at=now,
    )


def delete_replica(replica: lh.Replica, now: float) -> Command:
    return new_command(
        service=SERVICE,
        verb=Verb.DELETE,
        target=_target(replica, "Replica", with_uid=True),
        preconditions=(V2_ENGINE, FieldValue(path="/spec/nodeID", value=replica.spec.node_id)),
        reason=f"failing-replicas: delete stopped v2 replica on upgrading node {replica.spec.node_id}",
        created_at=now,
    )


def delete_instance_manager(
    im: lh.InstanceManager, new_image: str, now: float, node: lh.Node | None = None
) -> Command:
    related: tuple[RelatedPrecondition, ...] = ()
    if node is not None:
        meta = node.metadata
        related = (
            RelatedPrecondition(
                target=Target(kind="Node", namespace=meta.namespace, name=meta.name, uid=meta.uid),
                holds=(FieldValue(path=RV, value=meta.resource_version),),
            ),
        )
    return new_command(
        service=SERVICE,
        verb=Verb.DELETE,
        target=_target(im, "InstanceManager", with_uid=True),
        preconditions=(
            V2_ENGINE,
            FieldValue(path="/spec/nodeID", value=im.spec.node_id),
            FieldValue(path="/spec/image", value=im.spec.image),
        ),
        related=related,
        reason=f"upgrading-instance-manager: replace {im.spec.image} by {new_image} on {im.spec.node_id}",
        created_at=now,
    )


def node_upgrade_name(manager: lh.DataEngineUpgradeManager, node: str, attempt: int) -> str:
    """`<manager>-<node>-<8 hex>`, as Longhorn names it, but derived from the manager's uid, the
    node and the attempt instead of random: a restarted decider names the same object."""
    meta = manager.metadata
    return f"{meta.name}-{node}-{short_hash(meta.uid, meta.name, node, str(attempt))}"


def create_node_upgrade(
    manager: lh.DataEngineUpgradeManager, node: str, attempt: int, snapshot: bool, now: float
) -> Command:
    meta = manager.metadata
    name = node_upgrade_name(manager, node, attempt)
    body = {
        "apiVersion": f"{CORRAL_GROUP}/{CORRAL_VERSION}",
        "kind": NODE_UPGRADE_KIND,
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": {
                COMPONENT_LABEL: "node-data-engine-upgrade",
                MANAGER_LABEL: meta.name,
                NODE_LABEL: node,
            },
            "finalizers": [NODE_UPGRADE_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": f"{CORRAL_GROUP}/{CORRAL_VERSION}",
                    "kind": MANAGER_KIND,
                    "name": meta.name,
                    "uid": meta.uid,
                }
            ],
        },
        "spec": {
            "nodeID": node,
            "dataEngine": V2,
            "instanceManagerImage": manager.status.instance_manager_image,
            "dataEngineUpgradeManager": meta.name,
            "snapshotBeforeUpgrade": snapshot,
        },
    }
    return new_command(
        service=SERVICE,
        verb=Verb.CREATE,
        target=Target(kind=NODE_UPGRADE_KIND, namespace=meta.namespace, name=name),
        body=body,
        reason=f"upgrading: start node {node} (attempt {attempt + 1})",
        created_at=now,
    )


def release_node_upgrade(node_upgrade: lh.NodeDataEngineUpgrade, why: str, now: float) -> Command:
    """Take v2-upgrade's finalizer off a node upgrade being deleted: it goes, and with it its node's
    `DataEngineUpgradeRequested` (§5.4)."""
    meta = node_upgrade.metadata
    kept = [f for f in meta.finalizers if f != NODE_UPGRADE_FINALIZER]
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH,
        target=_target(node_upgrade, NODE_UPGRADE_KIND),
        changes=(FieldValue(path="/metadata/finalizers", value=kept),),
        preconditions=(FieldValue(path=RV, value=meta.resource_version),),
        reason=f"deleted: release node {node_upgrade.spec.node_id} ({why})",
        created_at=now,
    )


def snapshot_name(node_upgrade: lh.NodeDataEngineUpgrade, volume: str) -> str:
    meta = node_upgrade.metadata
    return f"{node_upgrade.spec.data_engine_upgrade_manager}-{short_hash(meta.uid, meta.name, volume)}"


def create_snapshot(node_upgrade: lh.NodeDataEngineUpgrade, volume: str, now: float) -> Command:
    meta = node_upgrade.metadata
    name = snapshot_name(node_upgrade, volume)
    body = {
        "apiVersion": f"{LONGHORN_GROUP}/{LONGHORN_VERSION}",
        "kind": "Snapshot",
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": {FOR_UPGRADE_LABEL: meta.name, "longhornvolume": volume},
        },
        "spec": {"volume": volume, "createSnapshot": True, "labels": {FOR_UPGRADE_LABEL: meta.name}},
    }
    return new_command(
        service=SERVICE,
        verb=Verb.CREATE,
        target=Target(kind="Snapshot", namespace=meta.namespace, name=name),
        body=body,
        reason=f"initializing: snapshot volume {volume} before upgrading node {node_upgrade.spec.node_id}",
        created_at=now,
    )
