"""Longhorn's nullable fields decode as `null` and as absent, in every slim Struct of a kind corral
models, read as empty either way.

The paths are not written here: they are parsed from tests/data/corpus/nullable-fields.md, which
was read mechanically from Longhorn's CRDs at every release from 1.4 to 1.12, so a field a new
release makes nullable is tested as soon as the file lists it. A path the slim Struct does not
model is still decoded (the decoder must skip it, null or not); a modelled one must come back as
the empty container, never None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from corral_engine_upgrade.image_facts import EngineImageFacts, node_map
from corral_model import longhorn as lh
from tests.fixtures.corpus import nullable_paths

# The kinds of nullable-fields.md that corral models, and every slim Struct that decodes each.
MODELLED: dict[str, tuple[type[Any], ...]] = {
    "Volume": (lh.Volume,),
    "Engine": (lh.Engine,),
    "Replica": (lh.Replica,),
    "EngineImage": (lh.EngineImage, EngineImageFacts),
    "Node": (lh.Node,),
    "Setting": (lh.Setting,),
    "InstanceManager": (lh.InstanceManager,),
}

PATHS = nullable_paths()
CASES = [
    pytest.param(struct, path, id=f"{struct.__name__}:{path}")
    for kind, structs in MODELLED.items()
    for struct in structs
    for path in sorted(PATHS[kind])
]


def _steps(path: str) -> list[tuple[str, str]]:
    """`status.instanceEngines{}.status.conditions` → [(status, ""), (instanceEngines, "{}"), …]."""
    out = []
    for token in path.split("."):
        container = token[-2:] if token.endswith(("{}", "[]")) else ""
        out.append((token[: len(token) - len(container)], container))
    return out


def document(path: str, *, null: bool) -> dict[str, Any]:
    """An object whose `path` is null (`null=True`) or absent, every map/list on the way holding one
    entry (key "k") that leads to it."""
    root: dict[str, Any] = {"metadata": {"name": "x", "namespace": "longhorn-system"}}
    node = root
    steps = _steps(path)
    for key, container in steps[:-1]:
        child: dict[str, Any] = {}
        if container == "{}":
            node[key] = {"k": child}
        elif container == "[]":
            node[key] = [child]
        else:
            child = node.setdefault(key, child)
        node = child
    if null:
        node[steps[-1][0]] = None
    return root


_UNMODELLED = object()


def read(obj: Any, path: str) -> Any:
    """The decoded value at `path`, or _UNMODELLED when the slim Struct does not declare it."""
    value = obj
    for key, container in _steps(path):
        by_json_name = {f.encode_name: f.name for f in msgspec.structs.fields(type(value))}
        if key not in by_json_name:
            return _UNMODELLED
        value = getattr(value, by_json_name[key])
        if container == "{}":
            value = value["k"]
        elif container == "[]":
            value = value[0]
    return value


def test_the_file_lists_what_corral_models() -> None:
    """The parser found every kind and the paths known to bite (a parse that found nothing would
    make every case below vacuous)."""
    assert set(MODELLED) <= set(PATHS)
    assert PATHS["Setting"] == set()
    assert {"status.replicaModeMap", "status.snapshots{}.children"} <= PATHS["Engine"]
    assert {"status.conditions", "status.nodeDeploymentMap"} <= PATHS["EngineImage"]
    assert "status.instanceEngines{}.status.conditions" in PATHS["InstanceManager"]
    assert "status.conditions" in PATHS["InstanceManager"]  # from 1.11
    assert sum(len(p) for p in PATHS.values()) == 35  # as of the 1.12.1 file


@pytest.mark.parametrize(("struct", "path"), CASES)
def test_nullable_path_decodes_as_null_and_as_absent(struct: type[Any], path: str) -> None:
    as_null = document(path, null=True)
    absent = document(path, null=False)
    routes: list[Callable[[dict[str, Any]], Any]] = [
        lambda doc: msgspec.json.decode(msgspec.json.encode(doc), type=struct)  # watcher, bus
    ]
    if struct is not EngineImageFacts:  # (only ever decoded from the bus)
        routes.append(lambda doc: msgspec.convert(doc, struct))  # `corral plan` on a parsed snapshot
    for decode in routes:
        from_null, from_absent = decode(as_null), decode(absent)
        value, default = read(from_null, path), read(from_absent, path)
        if value is _UNMODELLED:
            continue
        if isinstance(value, msgspec.Raw):  # EngineImageFacts keeps its node map as raw JSON
            value, default = node_map(value), node_map(default)
        assert value is not None, f"{struct.__name__}.{path}: null read as None"
        assert value == default, f"{struct.__name__}.{path}: null read as {value!r}, absent as {default!r}"
        assert isinstance(value, dict | tuple) and not value


def test_every_nullable_declaration_is_a_listed_path() -> None:
    """The other way round: a `Nullable[...]` field of the slim Structs sits on a listed path."""
    declared = set()

    def walk(struct: type[Any], prefix: str) -> None:
        for field in msgspec.structs.fields(struct):
            path = f"{prefix}{field.encode_name}"
            annotation = struct.__annotations__.get(field.name, "")
            if isinstance(annotation, str) and annotation.startswith("Nullable["):
                declared.add((struct, path))
            inner = field.type
            if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
                walk(inner, path + ".")

    for kind, structs in MODELLED.items():
        for struct in structs:
            declared.clear()
            walk(struct, "")
            for owner, path in declared:
                assert path in PATHS[kind], f"{owner.__name__}: {path} is not nullable in any release"


def test_modelled_nullable_fields_are_the_expected_ones() -> None:
    """What the slim Structs read from nullable fields (so a refactor cannot drop one unnoticed)."""
    modelled = {
        (struct.__name__, path)
        for kind, structs in MODELLED.items()
        for struct in structs
        for path in PATHS[kind]
        if read(msgspec.convert(document(path, null=False), struct), path) is not _UNMODELLED
    }
    assert modelled == {
        ("Engine", "status.replicaModeMap"),
        ("EngineImage", "status.conditions"),
        ("EngineImage", "status.nodeDeploymentMap"),
        ("EngineImageFacts", "status.nodeDeploymentMap"),
        ("Node", "status.conditions"),
        ("InstanceManager", "status.conditions"),
        ("InstanceManager", "status.instanceEngines"),
        ("InstanceManager", "status.instanceReplicas"),
        ("InstanceManager", "status.instanceEngineFrontends"),
    }


def test_a_stopped_engine_reads_an_empty_replica_mode_map() -> None:
    """The issue's own example: `Expected object, got null - at $.status.replicaModeMap`."""
    engine = msgspec.json.decode(
        b'{"metadata":{"name":"e"},"status":{"currentState":"stopped","replicaModeMap":null,'
        b'"backupStatus":null,"conditions":null,"snapshots":null}}',
        type=lh.Engine,
    )
    assert engine.status.replica_mode_map == {}
    assert engine.status.current_state == "stopped"
    # and on the bus it is an ordinary (empty, hence omitted) map again
    assert b"replicaModeMap" not in msgspec.json.encode(engine)


def test_a_null_becomes_a_fresh_container_each_time() -> None:
    """The kube decoder edits a decoded object's own containers in place: never one shared dict."""
    raw = b'{"metadata":{"name":"e"},"status":{"replicaModeMap":null}}'
    first, second = (msgspec.json.decode(raw, type=lh.Engine) for _ in range(2))
    first.status.replica_mode_map["r"] = "RW"
    assert second.status.replica_mode_map == {}
