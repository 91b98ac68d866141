"""The managed components of §3.3 and, per component, which of setting-sync's settings it lags and
what to write to it.

Components are the CSI workloads the actuator policy names (the `longhorn-csi-plugin` DaemonSet,
the four CSI sidecar Deployments) and the instance-manager, share-manager and
backing-image-manager pods. A workload's pod template is patched; a pod is deleted (Longhorn's
controllers recreate it with the current settings). Unmanaged workloads (longhorn-manager, the UI,
the driver deployer) are never components, whatever their labels say.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from corral_dangerzone.csi_limits import CSI_COMPONENTS
from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.network import CNI_NETWORKS_ANNOTATION
from corral_dangerzone.node_selector import same_node_selector
from corral_dangerzone.quantity import same_quantity
from corral_dangerzone.table import SettingName
from corral_dangerzone.tolerations import (
    LAST_APPLIED_TOLERATIONS_ANNOTATION,
    decode_last_applied,
    same_toleration_set,
)
from corral_dangerzone.workloads import template_tolerations
from corral_decision.pod_delete import COMPONENT_LABEL
from corral_model.envelopes import FieldValue
from corral_model.longhorn import (
    Container,
    DaemonSet,
    Deployment,
    Pod,
    PodSpec,
    Probe,
    ResourceRequirements,
)
from corral_setting_sync.wanted import ENGINE_IMAGE_PROBE, Wanted

N = SettingName

CSI_PLUGIN = "longhorn-csi-plugin"
CSI_DEPLOYMENTS = frozenset({"csi-attacher", "csi-provisioner", "csi-resizer", "csi-snapshotter"})
ENGINE_IMAGE_COMPONENT = "engine-image"
ENGINE_IMAGE_PREFIX = "engine-image-"
"""Longhorn names an engine image's DaemonSet `engine-image-<EngineImage name>` and labels it
`longhorn.io/component: engine-image`; both must hold (the actuator policy checks the same)."""
_CSI_CONTAINERS = frozenset(CSI_COMPONENTS)


class Role(enum.StrEnum):
    CSI_PLUGIN = "csi-plugin"
    CSI_DEPLOYMENT = "csi-deployment"
    ENGINE_IMAGE = "engine-image"
    INSTANCE_MANAGER = "instance-manager"
    SHARE_MANAGER = "share-manager"
    BACKING_IMAGE_MANAGER = "backing-image-manager"

    @property
    def is_pod(self) -> bool:
        return self not in (Role.CSI_PLUGIN, Role.CSI_DEPLOYMENT, Role.ENGINE_IMAGE)


_POD_ROLES = {r.value: r for r in (Role.INSTANCE_MANAGER, Role.SHARE_MANAGER, Role.BACKING_IMAGE_MANAGER)}
_GROUP_A = (N.TAINT_TOLERATION, N.PRIORITY_CLASS, N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR)
SETTINGS_OF: Mapping[Role, tuple[SettingName, ...]] = {
    Role.CSI_PLUGIN: (
        *_GROUP_A,
        N.ENDPOINT_NETWORK_FOR_RWX_VOLUME,
        N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS,
    ),
    Role.CSI_DEPLOYMENT: (*_GROUP_A, N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS),
    # Group A as on every DaemonSet labelled `longhorn.io/managed-by` (Longhorn's setting
    # controller collects them all; the engine-image controller reads the settings only when it
    # creates the DaemonSet), and group C's probe settings.
    Role.ENGINE_IMAGE: (*_GROUP_A, *ENGINE_IMAGE_PROBE),
    Role.INSTANCE_MANAGER: (*_GROUP_A, N.STORAGE_NETWORK),
    Role.SHARE_MANAGER: _GROUP_A,
    Role.BACKING_IMAGE_MANAGER: (*_GROUP_A, N.STORAGE_NETWORK),
}
"""Which settings each kind of component carries (§3.3; storage-network: IM and BIM pods only)."""

Workload = DaemonSet | Deployment
Component = Workload | Pod


def role_of(kind: str, obj: Any) -> Role | None:
    """The component role of an object from the bus (kind token), None when it is not managed."""
    if kind == "pod":
        return _POD_ROLES.get(obj.metadata.labels.get(COMPONENT_LABEL, ""))
    if kind == "daemonset" and obj.metadata.name == CSI_PLUGIN:
        return Role.CSI_PLUGIN
    if (
        kind == "daemonset"
        and obj.metadata.name.startswith(ENGINE_IMAGE_PREFIX)
        and obj.metadata.labels.get(COMPONENT_LABEL) == ENGINE_IMAGE_COMPONENT
    ):
        return Role.ENGINE_IMAGE
    if kind == "deployment" and obj.metadata.name in CSI_DEPLOYMENTS:
        return Role.CSI_DEPLOYMENT
    return None


def _shape(obj: Component) -> tuple[PodSpec, Mapping[str, str]]:
    """The spec and annotations the settings are read from (a workload's pod template)."""
    if isinstance(obj, Pod):
        return obj.spec, obj.metadata.annotations
    template = obj.spec.template
    return template.spec, template.metadata.annotations


def same_facts(old: Component, new: Component) -> bool:
    """Nothing the staleness reads changed (most pod events are status updates)."""
    return _shape(old) == _shape(new) and old.metadata.deletion_timestamp == new.metadata.deletion_timestamp


def _tolerations_updated(annotations: Mapping[str, str], wanted: Wanted) -> bool:
    try:
        last = decode_last_applied(annotations.get(LAST_APPLIED_TOLERATIONS_ANNOTATION))
    except SettingValueError:
        return False  # a malformed annotation is rewritten (a template) or its pod recreated
    return same_toleration_set(last, wanted.tolerations)


def same_resources(a: ResourceRequirements, b: ResourceRequirements) -> bool:
    """Equal as quantities (`0.25` = `250m`), resource by resource."""
    return all(
        x.keys() == y.keys() and all(same_quantity(x[k], y[k]) for k in x)
        for x, y in ((a.requests, b.requests), (a.limits, b.limits))
    )


def updated(name: SettingName, role: Role, obj: Component, wanted: Wanted) -> bool:
    """Does `obj` carry `name`'s wanted value, by Longhorn's comparison for it?"""
    spec, annotations = _shape(obj)
    if name is N.TAINT_TOLERATION:
        return _tolerations_updated(annotations, wanted)
    if name is N.PRIORITY_CLASS:
        return spec.priority_class_name == wanted.priority_class
    if name is N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR:
        return same_node_selector(spec.node_selector, wanted.node_selector)
    if name is N.STORAGE_NETWORK:
        return annotations.get(CNI_NETWORKS_ANNOTATION, "") == wanted.storage_network_annotation
    if name is N.ENDPOINT_NETWORK_FOR_RWX_VOLUME:
        return annotations.get(CNI_NETWORKS_ANNOTATION) == wanted.endpoint_network_annotation
    if name is N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS:
        return all(
            same_resources(c.resources, wanted.csi_limits.resources_for(c.name))
            for c in spec.containers
            if c.name in _CSI_CONTAINERS
        )
    if name in ENGINE_IMAGE_PROBE:
        field = ENGINE_IMAGE_PROBE[name]
        return all(_probe_value(c.liveness_probe, field) == wanted.probe[field] for c in _probed(spec))
    return True


def _probed(spec: PodSpec) -> list[Container]:
    """The containers Longhorn's probe settings reach: those with a liveness probe."""
    return [c for c in spec.containers if c.liveness_probe is not None]


def _probe_value(probe: Probe | None, field: str) -> int:
    assert probe is not None
    if field == "periodSeconds":
        return probe.period_seconds
    if field == "timeoutSeconds":
        return probe.timeout_seconds
    return probe.failure_threshold


def lagging(
    role: Role, obj: Component, wanted: Wanted, valid: Iterable[SettingName]
) -> frozenset[SettingName]:
    """The settings (among `valid` ones) `obj` does not carry yet."""
    carried = SETTINGS_OF[role]
    return frozenset(n for n in valid if n in carried and not updated(n, role, obj, wanted))


def _pointer(*tokens: str) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


TOLERATIONS = _pointer("spec", "template", "spec", "tolerations")
LAST_APPLIED = _pointer("spec", "template", "metadata", "annotations", LAST_APPLIED_TOLERATIONS_ANNOTATION)
PRIORITY_CLASS = _pointer("spec", "template", "spec", "priorityClassName")
NODE_SELECTOR = _pointer("spec", "template", "spec", "nodeSelector")
CNI_NETWORKS = _pointer("spec", "template", "metadata", "annotations", CNI_NETWORKS_ANNOTATION)


def template_changes(obj: Workload, names: Iterable[SettingName], wanted: Wanted) -> tuple[FieldValue, ...]:
    """The pod-template fields to write so `obj` carries `names` (None: remove the field)."""
    template = obj.spec.template
    changes: list[FieldValue] = []
    for name in sorted(names):
        if name is N.TAINT_TOLERATION:
            try:
                last = decode_last_applied(
                    template.metadata.annotations.get(LAST_APPLIED_TOLERATIONS_ANNOTATION)
                )
            except SettingValueError:
                last = ()
            merged = template_tolerations(template.spec.tolerations, last, wanted.tolerations)
            changes.append(FieldValue(path=TOLERATIONS, value=[msgspec.to_builtins(t) for t in merged]))
            changes.append(FieldValue(path=LAST_APPLIED, value=wanted.last_applied))
        elif name is N.PRIORITY_CLASS:
            changes.append(FieldValue(path=PRIORITY_CLASS, value=wanted.priority_class or None))
        elif name is N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR:
            changes.append(FieldValue(path=NODE_SELECTOR, value=dict(wanted.node_selector) or None))
        elif name is N.ENDPOINT_NETWORK_FOR_RWX_VOLUME:
            changes.append(FieldValue(path=CNI_NETWORKS, value=wanted.endpoint_network_annotation))
        elif name is N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS:
            for index, container in enumerate(template.spec.containers):
                if container.name in _CSI_CONTAINERS:
                    resources = wanted.csi_limits.resources_for(container.name)
                    path = _pointer("spec", "template", "spec", "containers", str(index), "resources")
                    changes.append(FieldValue(path=path, value=msgspec.to_builtins(resources)))
        elif name in ENGINE_IMAGE_PROBE:
            field = ENGINE_IMAGE_PROBE[name]
            for index, container in enumerate(template.spec.containers):
                if container.liveness_probe is not None:
                    at = ("spec", "template", "spec", "containers", str(index), "livenessProbe", field)
                    path = _pointer(*at)
                    changes.append(FieldValue(path=path, value=wanted.probe[field]))
    return tuple(changes)
