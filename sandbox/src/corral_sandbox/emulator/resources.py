"""What the emulator serves: one generic description per resource type, built-in or from a CRD.

Every kind is stored and served by the same generic code; a `ResourceType` only says how the apiserver
would treat it (scope, status subresource, whether `metadata.generation` is tracked, whether create
drops the status) and how it appears in discovery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CRD_GROUP = "apiextensions.k8s.io"
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    status_subresource: bool = False  # status writes go through /status only
    tracks_generation: bool = False  # metadata.generation bumped on non-status, non-metadata changes
    create_keeps_status: bool = False  # a Node is registered with its status; most kinds start without
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    extra_versions: tuple[str, ...] = field(default=())  # other served versions of a CRD
    # a CRD version's openAPIV3Schema: which nulls a write keeps (nulls.py); None for built-ins
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`volumes.longhorn.io` / `pods`: how the apiserver names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def is_crd(self) -> bool:
        """Whether objects of this type are CustomResourceDefinitions (writes change what is served)."""
        return self.group == CRD_GROUP and self.plural == "customresourcedefinitions"

    def discovery(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": VERBS,
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        if self.status_subresource:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


def _core(plural: str, kind: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(group="", version="v1", plural=plural, kind=kind, namespaced=namespaced, **kw)


BUILTINS: tuple[ResourceType, ...] = (
    _core("pods", "Pod", status_subresource=True, tracks_generation=True, short_names=("po",)),
    _core("nodes", "Node", False, status_subresource=True, create_keeps_status=True, short_names=("no",)),
    _core("namespaces", "Namespace", False, status_subresource=True, short_names=("ns",)),
    _core("configmaps", "ConfigMap", short_names=("cm",)),
    _core("secrets", "Secret"),
    _core("services", "Service", status_subresource=True, short_names=("svc",)),
    _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    _core("events", "Event", short_names=("ev",)),
    ResourceType(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        status_subresource=True,
        tracks_generation=True,
        short_names=("ds",),
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        status_subresource=True,
        tracks_generation=True,
        short_names=("deploy",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        status_subresource=True,
        tracks_generation=True,
        short_names=("rs",),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short_names=("pc",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",)),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        status_subresource=True,
        tracks_generation=True,
        short_names=("crd", "crds"),
    ),
)


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves, one per served version.

    Raises ValueError with a field path when the CRD lacks what the apiserver would require.
    """
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        raise ValueError("spec: Required value")
    group = spec.get("group")
    names = spec.get("names") or {}
    plural = names.get("plural")
    kind = names.get("kind")
    scope = spec.get("scope", "Namespaced")
    if not group or not isinstance(group, str):
        raise ValueError("spec.group: Required value")
    if not plural or not kind:
        raise ValueError("spec.names: plural and kind are required")
    if scope not in ("Namespaced", "Cluster"):
        raise ValueError(f"spec.scope: Unsupported value: {scope!r}")
    expected = f"{plural}.{group}"
    name = (crd.get("metadata") or {}).get("name")
    if name != expected:
        raise ValueError(f'metadata.name: Invalid value: {name!r}: must be spec.names.plural+"."+spec.group')
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    if not versions:
        raise ValueError("spec.versions: Required value: must have at least one served version")
    all_names = tuple(v["name"] for v in versions)
    out = []
    for v in versions:
        subresources = v.get("subresources") or {}
        out.append(
            ResourceType(
                group=group,
                version=v["name"],
                plural=plural,
                kind=kind,
                namespaced=scope == "Namespaced",
                singular=names.get("singular") or kind.lower(),
                status_subresource="status" in subresources,
                tracks_generation=True,
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                extra_versions=tuple(n for n in all_names if n != v["name"]),
                schema=_open_api_schema(v),
            )
        )
    return out


def _open_api_schema(version: dict[str, Any]) -> dict[str, Any] | None:
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    return schema if isinstance(schema, dict) else None
