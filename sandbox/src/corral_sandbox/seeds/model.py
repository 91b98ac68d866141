"""The seed file: a small declarative description of a Longhorn-like cluster.

```yaml
namespace: longhorn-system
longhornVersion: v1.10.0
seed: 7                       # the simulator's RNG seed
nodes: 3                      # or a list: [{name: node-1, cpu: "4", ready: true, schedulable: true}]
                              # (also: cordoned, hugepages: 4Gi, hugepagesAllocatable, imCPURequest: 500)
engineImages:                 # exactly one has default: true
  - {image: longhornio/longhorn-engine:v1.10.0, default: true}
imageProfiles:                # images the simulator should know (they are not created)
  longhornio/longhorn-engine:v1.10.0-wrong: {working: false}
  longhornio/longhorn-engine:v1.10.0-bad: {stallShare: 0.3}   # live upgrades stall on ~30 % of volumes
  longhornio/longhorn-engine:cli-7: {cliAPIVersion: 7, cliAPIMinVersion: 7}
instanceManagerImage: longhornio/longhorn-instance-manager:v1.10.0
settings: {concurrent-automatic-engine-upgrade-per-node-limit: "0"}   # on top of Longhorn's defaults
volumes:                      # explicit volumes …
  - {name: vol-1, replicas: 2, size: 1Gi, attachedTo: node-1}
generate:                     # … and/or generated ones
  volumes: 20
  replicas: 3
  attachedRatio: 0.5
```

Real objects, as `kubectl get -o yaml` prints them (the corpus's, say), go under `objects:` and
are loaded as they are, status included (see real_objects.py); a file holding only such objects
(one or several YAML documents, or a `kind: List`) is a seed of the default cluster plus them.

Parsing is strict: an unknown key or a bad value is a `SeedError` naming it, never a half-built cluster.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from corral_sandbox.seeds.real_objects import ObjectSeedError, flatten, is_object, parse_objects
from corral_sandbox.simulator.config import ImageProfile, SimConfig
from corral_sandbox.simulator.settings import DEFAULT_INSTANCE_MANAGER_IMAGE, LONGHORN_VERSION


class SeedError(ValueError):
    """The seed file is not valid; the message names the offending key."""


@dataclass(frozen=True)
class NodeSeed:
    name: str
    cpu: str = "4"
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    cordoned: bool = False
    """The Kubernetes node's `spec.unschedulable` (no new IM pod there)."""
    hugepages: str = ""
    """`hugepages-2Mi` capacity (a quantity, "4Gi"); "" reports none."""
    hugepages_allocatable: str = ""
    """`hugepages-2Mi` allocatable when it differs from the capacity."""
    im_cpu_request: int = 0
    """The Longhorn node's `spec.instanceManagerCPURequest` override, millicpu (0: the setting's)."""


@dataclass(frozen=True)
class EngineImageSeed:
    image: str
    default: bool = False


@dataclass(frozen=True)
class VolumeSeed:
    name: str
    replicas: int = 3
    size: str = "1Gi"
    attached_to: str = ""
    image: str = ""  # "" = the default engine image
    data_engine: str = "v1"
    standby: bool = False
    data_locality: str = "disabled"


@dataclass(frozen=True)
class GenerateSeed:
    volumes: int = 0
    replicas: int = 3
    size: str = "1Gi"
    attached_ratio: float = 0.5


@dataclass(frozen=True)
class Seed:
    namespace: str = "longhorn-system"
    longhorn_version: str = LONGHORN_VERSION
    seed: int = 0
    nodes: tuple[NodeSeed, ...] = ()
    engine_images: tuple[EngineImageSeed, ...] = ()
    image_profiles: dict[str, ImageProfile] = field(default_factory=dict)
    instance_manager_image: str = DEFAULT_INSTANCE_MANAGER_IMAGE
    settings: dict[str, str] = field(default_factory=dict)
    volumes: tuple[VolumeSeed, ...] = ()
    generate: GenerateSeed = GenerateSeed()
    objects: tuple[dict[str, Any], ...] = ()  # real Longhorn objects, loaded as given

    @property
    def default_engine_image(self) -> str:
        return next(ei.image for ei in self.engine_images if ei.default)

    def sim_config(self, **overrides: Any) -> SimConfig:
        """A SimConfig for this cluster: its namespace, seed and image profiles, plus `overrides`."""
        images = {**self.image_profiles, **overrides.pop("images", {})}
        return SimConfig(namespace=self.namespace, seed=self.seed, images=images, **overrides)


_PROFILE_KEYS = {
    "version": "version",
    "gitCommit": "git_commit",
    "cliAPIVersion": "cli_api_version",
    "cliAPIMinVersion": "cli_api_min_version",
    "controllerAPIVersion": "controller_api_version",
    "controllerAPIMinVersion": "controller_api_min_version",
    "dataFormatVersion": "data_format_version",
    "dataFormatMinVersion": "data_format_min_version",
    "working": "working",
    "undeployedNodes": "undeployed_nodes",
    "stallShare": "stall_share",
    "stallsOn": "stalls_on",
}


def load_seed(path: str | Path) -> Seed:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise SeedError(f"cannot read seed file {path}: {error}") from error
    return parse_seed(text, source=str(path))


def parse_seed(text: str, source: str = "<seed>") -> Seed:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise SeedError(f"{source}: not valid YAML: {error}") from error
    if docs and all(is_object(d) for d in docs):
        data: Any = {"objects": flatten(docs)}
    elif len(docs) > 1:
        raise SeedError(f"{source}: several YAML documents, but not all Kubernetes objects")
    else:
        data = docs[0] if docs else {}
    if not isinstance(data, dict):
        raise SeedError(f"{source}: the top level must be a mapping")
    return seed_from_dict(data, source)


def seed_from_dict(data: dict[str, Any], source: str = "<seed>") -> Seed:
    _only(
        data,
        {
            "namespace",
            "longhornVersion",
            "seed",
            "nodes",
            "engineImages",
            "imageProfiles",
            "instanceManagerImage",
            "settings",
            "volumes",
            "generate",
            "objects",
        },
        source,
    )
    try:
        real = parse_objects(data.get("objects") or [], f"{source}: objects")
    except ObjectSeedError as error:
        raise SeedError(str(error)) from None
    nodes_raw = data.get("nodes", 3)
    if isinstance(nodes_raw, int):
        nodes = tuple(NodeSeed(f"node-{i}") for i in range(1, nodes_raw + 1))
    elif isinstance(nodes_raw, list):
        nodes = tuple(_node(n, f"{source}: nodes[{i}]") for i, n in enumerate(nodes_raw))
    else:
        raise SeedError(f"{source}: nodes must be a count or a list")
    if not nodes:
        raise SeedError(f"{source}: at least one node is needed")
    images_raw = data.get("engineImages") or [
        {"image": "longhornio/longhorn-engine:v1.10.0", "default": True}
    ]
    images = tuple(_engine_image(e, f"{source}: engineImages[{i}]") for i, e in enumerate(images_raw))
    defaults = [e for e in images if e.default]
    if len(defaults) != 1:
        raise SeedError(f"{source}: exactly one engine image must have default: true (found {len(defaults)})")
    profiles = {
        str(image): _profile(raw, f"{source}: imageProfiles[{image}]")
        for image, raw in (data.get("imageProfiles") or {}).items()
    }
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise SeedError(f"{source}: settings must be a mapping of name to value")
    node_names = {n.name for n in nodes}
    volumes = tuple(
        _volume(v, f"{source}: volumes[{i}]", node_names) for i, v in enumerate(data.get("volumes") or [])
    )
    generate_raw = data.get("generate") or {}
    _only(generate_raw, {"volumes", "replicas", "size", "attachedRatio"}, f"{source}: generate")
    generate = GenerateSeed(
        volumes=_int(generate_raw.get("volumes", 0), f"{source}: generate.volumes", minimum=0),
        replicas=_int(generate_raw.get("replicas", 3), f"{source}: generate.replicas", minimum=1),
        size=str(generate_raw.get("size", "1Gi")),
        attached_ratio=float(generate_raw.get("attachedRatio", 0.5)),
    )
    return Seed(
        namespace=str(data.get("namespace", "longhorn-system")),
        longhorn_version=str(data.get("longhornVersion", LONGHORN_VERSION)),
        seed=_int(data.get("seed", 0), f"{source}: seed"),
        nodes=nodes,
        engine_images=images,
        image_profiles=profiles,
        instance_manager_image=str(data.get("instanceManagerImage", DEFAULT_INSTANCE_MANAGER_IMAGE)),
        settings={str(k): str(v) for k, v in settings.items()},
        volumes=volumes,
        generate=generate,
        objects=real,
    )


def _only(data: Any, allowed: set[str], where: str) -> None:
    if not isinstance(data, dict):
        raise SeedError(f"{where}: must be a mapping")
    unknown = set(data) - allowed
    if unknown:
        raise SeedError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")


def _int(value: Any, where: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SeedError(f"{where}: must be an integer, not {value!r}")
    if minimum is not None and value < minimum:
        raise SeedError(f"{where}: must be at least {minimum}")
    return value


def _share(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise SeedError(f"{where}: must be a number from 0 to 1, not {value!r}")
    return float(value)


def _node(raw: Any, where: str) -> NodeSeed:
    if isinstance(raw, str):
        return NodeSeed(raw)
    _only(
        raw,
        {
            "name",
            "cpu",
            "labels",
            "ready",
            "schedulable",
            "cordoned",
            "hugepages",
            "hugepagesAllocatable",
            "imCPURequest",
        },
        where,
    )
    if "name" not in raw:
        raise SeedError(f"{where}: name is required")
    return NodeSeed(
        name=str(raw["name"]),
        cpu=str(raw.get("cpu", "4")),
        labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        ready=bool(raw.get("ready", True)),
        schedulable=bool(raw.get("schedulable", True)),
        cordoned=bool(raw.get("cordoned", False)),
        hugepages=str(raw.get("hugepages", "") or ""),
        hugepages_allocatable=str(raw.get("hugepagesAllocatable", "") or ""),
        im_cpu_request=_int(raw.get("imCPURequest", 0), f"{where}: imCPURequest", minimum=0),
    )


def _engine_image(raw: Any, where: str) -> EngineImageSeed:
    if isinstance(raw, str):
        return EngineImageSeed(raw)
    _only(raw, {"image", "default"}, where)
    if not raw.get("image"):
        raise SeedError(f"{where}: image is required")
    return EngineImageSeed(image=str(raw["image"]).strip(), default=bool(raw.get("default", False)))


def _profile(raw: Any, where: str) -> ImageProfile:
    _only(raw or {}, set(_PROFILE_KEYS), where)
    values: dict[str, Any] = {}
    for key, value in (raw or {}).items():
        attr = _PROFILE_KEYS[key]
        if attr in ("undeployed_nodes", "stalls_on"):
            values[attr] = frozenset(str(n) for n in value or [])
        elif attr == "stall_share":
            values[attr] = _share(value, f"{where}.{key}")
        elif attr in ("version", "git_commit"):
            values[attr] = str(value)
        elif attr == "working":
            values[attr] = bool(value)
        else:
            values[attr] = _int(value, f"{where}.{key}")
    return dataclasses.replace(ImageProfile(), **values)


def _volume(raw: Any, where: str, nodes: set[str]) -> VolumeSeed:
    _only(
        raw,
        {"name", "replicas", "size", "attachedTo", "image", "dataEngine", "standby", "dataLocality"},
        where,
    )
    if not raw.get("name"):
        raise SeedError(f"{where}: name is required")
    attached = str(raw.get("attachedTo") or "")
    if attached and attached not in nodes:
        raise SeedError(f"{where}: attachedTo {attached!r} is not a node of this seed")
    engine = str(raw.get("dataEngine", "v1"))
    if engine not in ("v1", "v2"):
        raise SeedError(f"{where}: dataEngine must be v1 or v2")
    return VolumeSeed(
        name=str(raw["name"]),
        replicas=_int(raw.get("replicas", 3), f"{where}.replicas", minimum=1),
        size=str(raw.get("size", "1Gi")),
        attached_to=attached,
        image=str(raw.get("image", "")),
        data_engine=engine,
        standby=bool(raw.get("standby", False)),
        data_locality=str(raw.get("dataLocality", "disabled")),
    )
