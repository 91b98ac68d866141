"""The one shape of a pod delete a decision service may send: guarded so that the actuator deletes
exactly the pod the decision was about (its uid and resourceVersion) and only a Longhorn component
pod (its `longhorn.io/component` label), as the actuator's policy requires of every pod delete."""

from __future__ import annotations

from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command
from corral_model.longhorn import Pod

COMPONENT_LABEL = "longhorn.io/component"
COMPONENT_LABEL_PATH = "/metadata/labels/" + COMPONENT_LABEL.replace("/", "~1")


def guarded_pod_delete(service: str, pod: Pod, component: str, reason: str, now: float) -> Command:
    """Delete `pod` if it is still this uid at this resourceVersion and labelled `component`."""
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
        reason=reason,
        created_at=now,
    )
