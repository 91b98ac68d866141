"""What Longhorn's setting controller expects of managed workloads and pods (§3.3 groups A and C),
so setting-sync can tell which objects are "not updated" and what to write, the way Longhorn does.

Group A objects are Longhorn-labelled DaemonSets and Deployments plus instance-manager,
share-manager and backing-image-manager pods; DaemonSets/Deployments get their template patched,
pods get deleted. Which objects to look at, and the volume preconditions, are the decider's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral_dangerzone.network import (
    CNI_NETWORKS_ANNOTATION,
    ENDPOINT_NETWORK_INTERFACE,
    STORAGE_NETWORK_INTERFACE,
    cni_annotation,
)
from corral_dangerzone.node_selector import same_node_selector
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.tolerations import decode_last_applied, same_toleration_set, toleration_set
from corral_model.longhorn import Probe, Toleration


def tolerations_updated(last_applied: str | None, tolerations: Iterable[Toleration]) -> bool:
    """An object is up to date when its last-applied annotation (missing = `[]`) equals the setting
    as a set. The object's actual tolerations are not looked at."""
    return same_toleration_set(decode_last_applied(last_applied), tolerations)


def template_tolerations(
    existing: Iterable[Toleration], last_applied: Iterable[Toleration], new: Iterable[Toleration]
) -> tuple[Toleration, ...]:
    """A DaemonSet/Deployment template's new tolerations: existing minus last-applied, plus new, by
    Longhorn's identity; tolerations someone else added survive. Order: kept ones, then new ones
    (Longhorn's is random)."""
    result = dict(toleration_set(existing))
    for identity in toleration_set(last_applied):
        result.pop(identity, None)
    result.update(toleration_set(new))
    return tuple(result.values())


def priority_class_updated(priority_class_name: str, settings: DangerZoneSettings) -> bool:
    return priority_class_name == settings.priority_class


def node_selector_updated(node_selector: Mapping[str, str] | None, settings: DangerZoneSettings) -> bool:
    """nil and empty count as equal; otherwise the maps must be equal."""
    return same_node_selector(node_selector, settings.node_selector)


def storage_network_pod_updated(annotations: Mapping[str, str], settings: DangerZoneSettings) -> bool:
    """IM and backing-image-manager pods: the CNI annotation equals the expected text ("" = absent)."""
    return annotations.get(CNI_NETWORKS_ANNOTATION, "") == cni_annotation(
        settings.storage_network, STORAGE_NETWORK_INTERFACE
    )


def csi_plugin_template_annotation(settings: DangerZoneSettings) -> str | None:
    """The csi-plugin DaemonSet template's CNI annotation: `lhnet2` from
    `endpoint-network-for-rwx-volume`, or None (must be absent) when that setting is empty."""
    if not settings.endpoint_network_for_rwx_volume:
        return None
    return cni_annotation(settings.endpoint_network_for_rwx_volume, ENDPOINT_NETWORK_INTERFACE)


def csi_plugin_template_updated(
    template_annotations: Mapping[str, str], settings: DangerZoneSettings
) -> bool:
    expected = csi_plugin_template_annotation(settings)
    if expected is None:
        return CNI_NETWORKS_ANNOTATION not in template_annotations
    return template_annotations.get(CNI_NETWORKS_ANNOTATION) == expected


def engine_image_liveness_probe(settings: DangerZoneSettings) -> Probe:
    """Group C: the liveness probe every engine-image DaemonSet must carry (period, timeout,
    failure threshold from the three settings; the initial delay is not a setting)."""
    return Probe(
        period_seconds=settings.engine_image_liveness_probe_period,
        timeout_seconds=settings.engine_image_liveness_probe_timeout,
        failure_threshold=settings.engine_image_liveness_probe_failure_threshold,
    )
