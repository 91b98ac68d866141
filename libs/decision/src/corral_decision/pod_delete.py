"""The one shape of a pod delete a decision service may send: guarded so that the actuator deletes
exactly the pod the decision was about (its uid and resourceVersion) and only a Longhorn component
pod (its `longhorn.io/component` label), as the actuator's policy requires of every pod delete.

A pod is deleted for what its owner showed, too: an instance manager's pod only while the instance
manager runs nothing. `idle_instance_manager` says so as a precondition on the instance manager,
which the actuator checks just before the delete (its `related` preconditions). And only on its
node as the decision read it (`node_as_read`): a node gone NotReady since refuses the delete, and
the decision taken once it is back is a new command, never dropped by LH_COMMANDS' dedup window
as a repeat of the refused one."""

from __future__ import annotations

from corral_model.envelopes import (
    Command,
    FieldValue,
    NoneInStates,
    RelatedPrecondition,
    Target,
    Verb,
    new_command,
)
from corral_model.longhorn import InstanceManager, Node, Pod

COMPONENT_LABEL = "longhorn.io/component"
COMPONENT_LABEL_PATH = "/metadata/labels/" + COMPONENT_LABEL.replace("/", "~1")


# Longhorn's `areDangerZoneSettingsSyncedToIMPod`: an instance in one of these states makes it busy.
BUSY_INSTANCE_STATES = ("running", "starting")
INSTANCE_MAPS = ("/status/instanceEngines", "/status/instanceEngineFrontends", "/status/instanceReplicas")


def idle_instance_manager(im: InstanceManager) -> RelatedPrecondition:
    """The instance manager `im` (this very one, by uid) still runs and starts nothing.

    Not its resourceVersion: a write that leaves it idle (a condition, a heartbeat) is no reason
    to keep a pod that lags its settings, while any instance starting is, whatever else changed."""
    meta = im.metadata
    return RelatedPrecondition(
        target=Target(kind="InstanceManager", namespace=meta.namespace, name=meta.name, uid=meta.uid),
        none_in=tuple(
            NoneInStates(path=path, field="/status/state", states=BUSY_INSTANCE_STATES)
            for path in INSTANCE_MAPS
        ),
    )


def node_as_read(node: Node) -> RelatedPrecondition:
    """The Longhorn node `node` unchanged since the decision read it (uid and resourceVersion)."""
    meta = node.metadata
    return RelatedPrecondition(
        target=Target(kind="Node", namespace=meta.namespace, name=meta.name, uid=meta.uid),
        holds=(FieldValue(path="/metadata/resourceVersion", value=meta.resource_version),),
    )


def guarded_pod_delete(
    service: str,
    pod: Pod,
    component: str,
    reason: str,
    now: float,
    related: tuple[RelatedPrecondition, ...] = (),
) -> Command:
    """Delete `pod` if it is still this uid at this resourceVersion and labelled `component`, and
    every `related` precondition (on the objects the decision read) still holds."""
    meta = pod.metadata
    return new_command(
        service=service,
        verb=Verb.DELETE,
        target=Target(kind="Pod", namespace=meta.namespace, name=meta.name, uid=meta.uid),
        preconditions=(
            FieldValue(path="/metadata/uid", value=meta.uid),
            FieldValue(path="/metadata/resourceVersion", value=meta.resource_version),
            FieldValue(path=COMPONENT_LABEL_PATH, value=component),
        ),
        related=related,
        reason=reason,
        created_at=now,
    )
