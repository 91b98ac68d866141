"""The two commands im-restart sends, with the preconditions that make a stale one fail.

* **Delete an IM pod**, exactly the pod judged: its uid and resourceVersion must still hold (a pod
  that changed, or was recreated, since the decision is refused and judged again) and it must
  carry the instance-manager label (the actuator's policy requires it as well). A restart for
  unsynced settings was judged on an idle IM, so it also requires the IM (this uid) to run and
  start nothing when the actuator deletes; a failed pod is deleted whatever its IM lists.
* **Patch the IM's SettingSynced condition**, on exactly the IM status judged (its
  resourceVersion). An existing condition is patched field by field at its index; a missing one
  is appended by writing the conditions list (JSON Patch cannot append through a field path).
"""

from __future__ import annotations

import time

import msgspec

from corral_decision.pod_delete import guarded_pod_delete, idle_instance_manager, node_as_read
from corral_im_restart.judge import SETTING_SYNCED
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command
from corral_model.longhorn import Condition, InstanceManager, Node, Pod

SERVICE = "im-restart"
CONDITION_MODE = "condition"


def delete_pod(
    pod: Pod, reason: str, now: float, idle: InstanceManager | None = None, node: Node | None = None
) -> Command:
    """Delete the IM pod `pod`; with `idle`, only while that IM still runs and starts nothing; with
    `node`, only while its Longhorn node is as read (NotReady since: refused)."""
    related = (idle_instance_manager(idle),) if idle is not None else ()
    if node is not None:
        related = (*related, node_as_read(node))
    return guarded_pod_delete(SERVICE, pod, "instance-manager", reason, now, related)


def rfc3339(seconds: float) -> str:
    """Longhorn's condition time format (`util.Now()`): UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def condition_differs(im: InstanceManager, wanted: Condition) -> bool:
    for current in im.status.conditions:
        if current.type == wanted.type:
            return (current.status, current.reason, current.message) != (
                wanted.status,
                wanted.reason,
                wanted.message,
            )
    return True


def patch_condition(im: InstanceManager, wanted: Condition, now: float) -> Command:
    """Set `wanted` (type SettingSynced) on the IM status; its transition time moves only when its
    status does, as Longhorn's SetCondition does."""
    meta = im.metadata
    conditions = im.status.conditions
    index = next((i for i, c in enumerate(conditions) if c.type == SETTING_SYNCED), None)
    tests: tuple[FieldValue, ...] = (
        FieldValue(path="/metadata/resourceVersion", value=meta.resource_version),
    )
    if index is not None:
        current = conditions[index]
        at = f"/status/conditions/{index}"
        tests += (FieldValue(path=f"{at}/type", value=SETTING_SYNCED),)
        changes: tuple[FieldValue, ...] = (
            FieldValue(path=f"{at}/status", value=wanted.status),
            FieldValue(path=f"{at}/reason", value=wanted.reason),
            FieldValue(path=f"{at}/message", value=wanted.message),
        )
        if current.status != wanted.status:
            changes += (FieldValue(path=f"{at}/lastTransitionTime", value=rfc3339(now)),)
    else:
        stamped = msgspec.structs.replace(wanted, last_transition_time=rfc3339(now), last_probe_time="")
        listed = [msgspec.to_builtins(c) for c in (*conditions, stamped)]
        for entry in listed:  # Longhorn writes every field, empty ones included
            entry.setdefault("reason", "")
            entry.setdefault("message", "")
        changes = (FieldValue(path="/status/conditions", value=listed),)
    summary = f"{wanted.status}" + (f" ({wanted.message})" if wanted.message else "")
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH_STATUS,
        target=Target(kind="InstanceManager", namespace=meta.namespace, name=meta.name),
        changes=changes,
        preconditions=tests,
        reason=f"{CONDITION_MODE}: SettingSynced {summary}",
        created_at=now,
    )


def command_mode(command: Command) -> str:
    """The commands counter's `mode`: `condition`, or the restart's reason (`settings-unsynced`,
    `pod-failed`): restarts counted by reason."""
    return command.reason.partition(":")[0] or str(command.verb)
