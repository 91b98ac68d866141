"""The three commands setting-sync sends, each with the preconditions that make a stale one fail.

* **Patch a workload's pod template** on exactly the object judged (its resourceVersion): the
  template tolerations are a merge of what it held, so any change in between must refuse it.
* **Delete a component pod**, exactly the pod judged: its uid and resourceVersion, and the
  component label (the actuator's policy requires it), so a pod recreated or changed since the
  decision is judged again instead of deleted.
* **Set a Setting's `status.applied`**, provided its value is still the one judged, so a value
  changed in between is never marked applied, on the version judged: a value set back and forth
  (A, B, A) within LH_COMMANDS' dedup window is a new decision with a new id, not a duplicate of
  the first one for JetStream (and the actuator's memory of ids) to drop.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral_dangerzone.table import SettingName
from corral_decision.pod_delete import COMPONENT_LABEL, guarded_pod_delete
from corral_model.envelopes import Command, FieldValue, RelatedPrecondition, Target, Verb, new_command
from corral_model.longhorn import DaemonSet, Deployment, InstanceManager, Pod, Setting

SERVICE = "setting-sync"


def _names(settings: Iterable[SettingName]) -> str:
    return ", ".join(sorted(settings))


def patch_template(
    kind: str,
    obj: DaemonSet | Deployment,
    changes: tuple[FieldValue, ...],
    settings: Iterable[SettingName],
    now: float,
) -> Command:
    meta = obj.metadata
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH,
        target=Target(kind=kind, namespace=meta.namespace, name=meta.name),
        changes=changes,
        preconditions=(FieldValue(path="/metadata/resourceVersion", value=meta.resource_version),),
        reason=f"template: {_names(settings)}",
        created_at=now,
    )


def delete_pod(
    pod: Pod, settings: Iterable[SettingName], now: float, related: tuple[RelatedPrecondition, ...] = ()
) -> Command:
    component = pod.metadata.labels.get(COMPONENT_LABEL, "")
    return guarded_pod_delete(SERVICE, pod, component, f"pod: {_names(settings)}", now, related)


def delete_instance_manager(im: InstanceManager, engine: str, setting: SettingName, now: float) -> Command:
    """A disabled data engine's IM CR, exactly as judged (uid and resourceVersion: an instance
    started on it since makes the delete fail), and only of that engine."""
    meta = im.metadata
    return new_command(
        service=SERVICE,
        verb=Verb.DELETE,
        target=Target(kind="InstanceManager", namespace=meta.namespace, name=meta.name, uid=meta.uid),
        preconditions=(
            FieldValue(path="/metadata/uid", value=meta.uid),
            FieldValue(path="/metadata/resourceVersion", value=meta.resource_version),
            FieldValue(path="/spec/dataEngine", value=engine),
        ),
        reason=f"instance-manager: {setting}",
        created_at=now,
    )


def set_applied(setting: Setting, applied: bool, why: str, now: float) -> Command:
    meta = setting.metadata
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH_STATUS,
        target=Target(kind="Setting", namespace=meta.namespace, name=meta.name),
        changes=(FieldValue(path="/status/applied", value=applied),),
        preconditions=(
            FieldValue(path="/value", value=setting.value),
            FieldValue(path="/metadata/resourceVersion", value=meta.resource_version),
        ),
        reason=f"applied: {str(applied).lower()} ({why})",
        created_at=now,
    )


def command_mode(command: Command) -> str:
    """The commands counter's `mode`: `template`, `pod`, `instance-manager` or `applied`."""
    return command.reason.partition(":")[0] or str(command.verb)
