"""The rules Longhorn's manager applies to a manual engine upgrade, with its refusal texts
(`POST /v1/volumes/{name}?action=engineUpgrade`, longhorn-manager `manager/volume.go`
`EngineUpgrade` at 5ddaa369; longhorn-behaviour.md §1.5), in Longhorn's order:

1. limit > 0 and the target is not the default engine image → only the default is allowed;
2. (v2 → refused; not applied here, see below);
3. the target is already `spec.image` → "upgrading in process … already";
4. an upgrade is in flight and the target is not `currentImage` (a rollback is) → refused;
5. the target image is not deployed on every replica node and the attached node → refused;
6. the same for the current image;
7. migrating → refused; 8. attached and not healthy → refused; 9. attached strict-local → refused.

The sandbox has no Longhorn REST API: an operator asks for an engine upgrade by changing a v1
volume's `spec.image` through the Kubernetes API, so the volume webhook (admission.py) applies these
rules to every such change. That is stricter than Longhorn, where a direct CR update meets only the
webhook — which is the point for corral: its writes meet the manager's rules too, so a scenario shows
they would pass them. A re-request of the image already asked for is, in the Kubernetes API, an
update that changes nothing; rule 3 answers that (only while the volume is upgrading, so other
no-op updates of a settled volume pass). v2 volumes are left out: their `spec.image` is the
instance-manager image and moves through the v2 data-engine upgrade, which rules 1 and 2 would
refuse (Longhorn's API rules never see those writes).
"""

from __future__ import annotations

from typing import Any, Protocol

from corral_sandbox.simulator.objects import engine_image_name

Obj = dict[str, Any]
LONGHORN = "longhorn.io"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
DEFAULT_IMAGE_SETTING = "default-engine-image"


class ClusterReader(Protocol):
    def list(
        self, group: str, plural: str, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[Obj]: ...

    def get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None: ...


def upgrade_in_flight(volume: Obj) -> bool:
    """An engine upgrade under way: the volume reports a current image and spec.image differs (a
    volume the controller has not picked up yet reports none, and is not upgrading)."""
    current = volume.get("status", {}).get("currentImage", "")
    return bool(current) and volume.get("spec", {}).get("image", "") != current


class EngineUpgradeRules:
    """Judges a manual engine-upgrade request against the cluster as the API server holds it."""

    def __init__(self, cluster: ClusterReader, namespace: str, setting: Any) -> None:
        """`setting(name) -> str`: a setting's value (Longhorn's default when the object is missing)."""
        self._cluster = cluster
        self._namespace = namespace
        self._setting = setting

    def refusal(self, volume: Obj, image: str) -> str | None:
        """Why upgrading `volume` (as stored now) to `image` is refused, in Longhorn's words; None
        when it is allowed."""
        reason = self._reason(volume, image)
        if reason is None:
            return None
        name = volume["metadata"]["name"]
        return f"cannot upgrade engine for volume {name} using image {image}: {reason}"

    def _reason(self, volume: Obj, image: str) -> str | None:
        vspec, vstatus = volume.get("spec", {}), volume.get("status", {})
        name = volume["metadata"]["name"]
        spec_image, current = vspec.get("image", ""), vstatus.get("currentImage", "")
        default = self._setting(DEFAULT_IMAGE_SETTING)
        if _as_int(self._setting(LIMIT_SETTING)) > 0 and image != default:
            return (
                f"upgrading to {image} is not allowed. Only allow to upgrade to the default engine image "
                f"{default} because the setting `Concurrent Automatic Engine Upgrade Per Node Limit` is "
                "greater than 0"
            )
        if spec_image == image:
            return (
                f"upgrading in process for volume {name} engine image from {current} to {spec_image} already"
            )
        if spec_image != current and image != current:
            return (
                f"upgrading in process for volume {name} engine image from {current} to {spec_image}, "
                "cannot upgrade to another engine image"
            )
        nodes = self._volume_nodes(volume)
        for candidate, whose in (
            (image, f"the engine image {image}"),
            (current, f"the volume's current engine image {current}"),
        ):
            ready, error = self._ready_on(candidate, nodes)
            what = f"cannot upgrade engine image for volume {name} from image {spec_image} to image {image}"
            if error:
                return f"{what}: {error}"
            if not ready:
                return (
                    f"{what} because {whose} is not deployed on the replicas' nodes or the node that the "
                    "volume is attached to"
                )
        if vspec.get("migrationNodeID") or vstatus.get("currentMigrationNodeID"):
            return "cannot upgrade during migration"
        attached = vstatus.get("state") == "attached"
        if attached and vstatus.get("robustness") != "healthy":
            return f"cannot do live upgrade for a unhealthy volume {name}"
        if attached and vspec.get("dataLocality") == "strict-local":
            return f"cannot do live upgrade for an attached strict-local volume {name}"
        return None

    def _volume_nodes(self, volume: Obj) -> list[str]:
        """CheckImageReadyOnAllVolumeReplicas: the attached node plus every scheduled replica's node."""
        name = volume["metadata"]["name"]
        nodes = [volume.get("status", {}).get("currentNodeID", "")]
        replicas = self._cluster.list(
            LONGHORN, "replicas", self._namespace, label_selector=f"longhornvolume={name}"
        )
        nodes += [
            r.get("spec", {}).get("nodeID", "")
            for r in replicas
            if r.get("spec", {}).get("volumeName") == name
        ]
        return [n for n in nodes if n]

    def _ready_on(self, image: str, nodes: list[str]) -> tuple[bool, str]:
        """CheckEngineImageReadiness: (ready, error). No node at all is "not ready", not an error."""
        if not nodes:
            return False, ""
        ei_name = engine_image_name(image)
        ei = self._cluster.get(LONGHORN, "engineimages", self._namespace, ei_name)
        if ei is None:
            return False, f'failed to get engine image {image}: engineimage.longhorn.io "{ei_name}" not found'
        status = ei.get("status", {})
        if status.get("state") not in ("deployed", "deploying"):
            return False, ""
        deployment = status.get("nodeDeploymentMap") or {}
        known = {n for n in nodes if self._cluster.get(LONGHORN, "nodes", self._namespace, n) is not None}
        return all(n in known and deployment.get(n) for n in nodes), ""


def _as_int(value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        return 0
