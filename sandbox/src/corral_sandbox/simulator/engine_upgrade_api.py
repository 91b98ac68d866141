"""The rules longhorn-manager applies to a manual engine upgrade, with its answers: the REST action
`POST /v1/volumes/{name}?action=engineUpgrade` (`manager/volume.go EngineUpgrade` at 5ddaa369;
longhorn-behaviour.md §1.5), served by manager_api.py. In Longhorn's order:

1. limit > 0 and the target is not the default engine image → only the default is allowed
   (judged before the volume is even looked up);
   the volume does not exist → 404;
2. a v2 volume → refused;
3. the target is already `spec.image` → "upgrading in process … already";
4. an upgrade is in flight and the target is not `currentImage` (a rollback is) → refused;
5. the target image is not deployed on every replica node and the attached node → refused;
6. the same for the current image;
7. migrating → refused; 8. attached and not healthy → refused; 9. attached strict-local → refused;
10. otherwise the caller sets `spec.image` (through the API server, so the volume webhook applies).

These rules are not the admission webhook's (admission.py): in Longhorn, a controller — or corral's
actuator — that patches `spec.image` through the Kubernetes API meets only the webhook.

Every refusal is wrapped as Longhorn wraps it ("cannot upgrade engine for volume V using image I: …")
and carries the HTTP status longhorn-manager's error handler gives it: 404 when the cause is a
not-found error it can still see through the wrapping (the volume), 500 for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from corral_sandbox.simulator.objects import engine_image_name
from corral_sandbox.simulator.settings import DEFAULTS

Obj = dict[str, Any]
LONGHORN = "longhorn.io"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
DEFAULT_IMAGE_SETTING = "default-engine-image"


class ClusterReader(Protocol):
    def list(
        self, group: str, plural: str, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[Obj]: ...

    def get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None: ...


@dataclass(frozen=True)
class Refusal:
    """longhorn-manager's answer to a refused request: its HTTP status and its error message."""

    status: int
    message: str


class EngineUpgradeRules:
    """Judges a manual engine-upgrade request against the cluster as the manager reads it."""

    def __init__(self, cluster: ClusterReader, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace

    def refusal(self, name: str, image: str) -> Refusal | None:
        """Why upgrading volume `name` to `image` is refused; None when the manager would set it."""
        try:
            reason = self._reason(name, image)
        except _NotFound as missing:
            return Refusal(404, _wrap(name, image, str(missing)))
        return None if reason is None else Refusal(500, _wrap(name, image, reason))

    def volume(self, name: str) -> Obj | None:
        return self._cluster.get(LONGHORN, "volumes", self._namespace, name)

    def _setting(self, name: str) -> str:
        """GetSettingWithAutoFillingRO: Longhorn's default when the Setting object is missing."""
        obj = self._cluster.get(LONGHORN, "settings", self._namespace, name)
        return str(obj.get("value", "")) if obj else DEFAULTS.get(name, "")

    def _reason(self, name: str, image: str) -> str | None:
        limit = self._setting(LIMIT_SETTING)
        try:
            over_zero = int(limit.strip()) > 0
        except ValueError:
            return f'strconv.ParseInt: parsing "{limit}": invalid syntax'
        default = self._setting(DEFAULT_IMAGE_SETTING)
        if over_zero and image != default:
            return (
                f"upgrading to {image} is not allowed. Only allow to upgrade to the default engine image "
                f"{default} because the setting `Concurrent Automatic Engine Upgrade Per Node Limit` is "
                "greater than 0"
            )
        volume = self.volume(name)
        if volume is None:
            raise _NotFound(f'volume.longhorn.io "{name}" not found')
        vspec, vstatus = volume.get("spec", {}), volume.get("status", {})
        if vspec.get("dataEngine", "v1") == "v2":
            return (
                f"cannot upgrade engine for volume {name} using image {image} because the volume is using "
                "data engine v2"
            )
        spec_image, current = vspec.get("image", ""), vstatus.get("currentImage", "")
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
        what = f"cannot upgrade engine image for volume {name} from image {spec_image} to image {image}"
        for candidate, whose in (
            (image, f"the engine image {image}"),
            (current, f"the volume's current engine image {current}"),
        ):
            ready, error = self._ready_on(candidate, nodes)
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
        """CheckImageReadyOnAllVolumeReplicas: the attached node plus every replica's node."""
        name = volume["metadata"]["name"]
        nodes = [volume.get("status", {}).get("currentNodeID", "")]
        replicas = self._cluster.list(
            LONGHORN, "replicas", self._namespace, label_selector=f"longhornvolume={name}"
        )
        nodes += [r.get("spec", {}).get("nodeID", "") for r in replicas]
        return [n for n in nodes if n]

    def _ready_on(self, image: str, nodes: list[str]) -> tuple[bool, str]:
        """CheckEngineImageReadiness: (ready, error). No node at all is "not ready", not an error.
        Longhorn formats this error into its message with %v, so it answers 500, not 404."""
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
        known = {n["metadata"]["name"] for n in self._cluster.list(LONGHORN, "nodes", self._namespace)}
        return all(n in known and deployment.get(n) for n in nodes), ""


class _NotFound(Exception):
    """A lookup that fails with Kubernetes' not-found error (the handler turns it into a 404)."""


def _wrap(name: str, image: str, reason: str) -> str:
    """The `errors.Wrapf` every EngineUpgrade error leaves through."""
    return f"cannot upgrade engine for volume {name} using image {image}: {reason}"
