"""Longhorn's admission webhooks for the kinds the simulator owns, as emulator admission hooks.

* EngineImage DELETE: the default engine image cannot be deleted; an image still referenced by a
  volume, engine or replica (spec.image or status.currentImage) cannot be deleted ("while being used").
* EngineImage CREATE: a second EngineImage for the same image is refused.
* Volume UPDATE (v1): a new `spec.image` must name an existing EngineImage that is not incompatible.

Webhooks read the cluster as the API server holds it (Longhorn's read its informer cache), through
`ClusterLookup` — the emulator's `list`/`get` fit it.
"""

from __future__ import annotations

from typing import Any, Protocol

from corral_sandbox.simulator.objects import engine_image_name
from corral_sandbox.simulator.settings import DEFAULTS

Obj = dict[str, Any]
LONGHORN = "longhorn.io"


class ClusterLookup(Protocol):
    def list(self, group: str, plural: str, namespace: str | None = None) -> list[Obj]: ...

    def get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None: ...


class AdmissionRegistry(Protocol):
    def register_admission(
        self, group: str, plural: str, fn: Any, *, name: str = "", code: int = 400
    ) -> None: ...


class LonghornWebhooks:
    def __init__(self, cluster: ClusterLookup, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace

    def install(self, registry: AdmissionRegistry) -> None:
        registry.register_admission(
            LONGHORN, "engineimages", self.engine_image, name="validator.longhorn.io", code=400
        )
        registry.register_admission(LONGHORN, "volumes", self.volume, name="validator.longhorn.io", code=400)

    def _setting(self, name: str) -> str:
        obj = self._cluster.get(LONGHORN, "settings", self._namespace, name)
        return str(obj.get("value", "")) if obj else DEFAULTS.get(name, "")

    def engine_image(self, operation: str, old: Obj | None, new: Obj | None) -> str | None:
        if operation == "DELETE" and old is not None:
            image = str(old.get("spec", {}).get("image", "")).strip()
            if image == self._setting("default-engine-image").strip():
                return f"unable to delete the default engine image {image}"
            users = self._users(image)
            if users:
                return (
                    f"unable to delete engine image {old['metadata']['name']} while being used by {users[0]}"
                )
            return None
        if operation == "CREATE" and new is not None:
            image = str(new.get("spec", {}).get("image", "")).strip()
            if not image:
                return "engine image spec.image is required"
            for existing in self._cluster.list(LONGHORN, "engineimages", self._namespace):
                if str(existing.get("spec", {}).get("image", "")).strip() == image:
                    return f"engine image {image} already exists as {existing['metadata']['name']}"
        return None

    def volume(self, operation: str, old: Obj | None, new: Obj | None) -> str | None:
        if operation != "UPDATE" or old is None or new is None:
            return None
        new_spec = new.get("spec", {})
        image = new_spec.get("image", "")
        if new_spec.get("dataEngine", "v1") != "v1" or image == old.get("spec", {}).get("image", ""):
            return None
        ei = self._cluster.get(LONGHORN, "engineimages", self._namespace, engine_image_name(image))
        if ei is None:
            return f"cannot find engine image {image} for volume {new['metadata']['name']}"
        if ei.get("status", {}).get("incompatible"):
            return f"engine image {image} is incompatible"
        return None

    def _users(self, image: str) -> list[str]:
        users = []
        for plural in ("volumes", "engines", "replicas"):
            for obj in self._cluster.list(LONGHORN, plural, self._namespace):
                if image in (obj.get("spec", {}).get("image"), obj.get("status", {}).get("currentImage")):
                    users.append(f"{plural[:-1]} {obj['metadata']['name']}")
        return users
