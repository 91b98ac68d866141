"""Reading `--snapshot`: a Kubernetes List in JSON or YAML, or a Longhorn support bundle.

A support bundle is what operators attach to Longhorn issues, so it is the snapshot of a real
cluster most often at hand. support-bundle-kit writes, per API group and preferred version, one
List per resource: `<bundle>/yamls/namespaced/<namespace>/<group>/<version>/<plural>.yaml` and
`<bundle>/yamls/cluster/<group>/<version>/<plural>.yaml` (the core group as `v1/…`), inside a zip
whose top folder is named after the bundle. Both the zip and its unpacked folder are read: every
YAML file under a `yamls` folder whose items are of a kind corral models becomes one List.

Some exporter versions re-serialised objects lossily (tests/data/corpus/README.md): an empty or
null value became the string "null", and large integers became floats (`1.18225516953e+11`).
`normalise_bundle` undoes what it can: a "null" string value is dropped (read as absent, the
field's empty default), an integral float becomes an int. Only bundles get this: in a kubectl
export "null" is a value like any other.

YAML timestamps are left as strings (a plain `safe_load` would turn an unquoted one into a
datetime, which no slim Struct field reads).
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from corral_model.kinds import KINDS

_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):  # type: ignore[misc]
    """Safe YAML without implicit timestamps."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BASE_LOADER.yaml_implicit_resolvers.items()
}

# The file names (plurals) of the kinds corral models: the only bundle files worth parsing.
_PLURALS = frozenset(f"{info.plural}.yaml" for info in KINDS.values())


def parse_text(text: str, origin: str) -> Any:
    """JSON, else YAML (one document)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:
            return yaml.load(text, Loader=_Loader)  # a SafeLoader, less its timestamps
        except yaml.YAMLError as e:
            raise ValueError(f"{origin}: neither JSON nor YAML: {e}") from e


def read_snapshot(path: str) -> Mapping[str, Any]:
    """The snapshot at `path` ('-': stdin) as one Kubernetes List (or object)."""
    if path != "-":
        source = Path(path)
        if source.is_dir():
            return normalise_bundle(_bundle_list(_directory_files(source), path))
        if zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as bundle:
                return normalise_bundle(_bundle_list(_zip_files(bundle), path))
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    document = parse_text(text, path)
    if not isinstance(document, Mapping):
        raise ValueError(f"{path}: expected a Kubernetes List object, got {type(document).__name__}")
    return document


def _wanted(relative: PurePosixPath) -> bool:
    return "yamls" in relative.parts[:-1] and relative.name in _PLURALS


def _directory_files(root: Path) -> Iterator[tuple[str, str]]:
    for file in sorted(root.rglob("*.yaml")):
        if _wanted(PurePosixPath(file.relative_to(root).as_posix())):
            yield str(file), file.read_text()


def _zip_files(bundle: zipfile.ZipFile) -> Iterator[tuple[str, str]]:
    for name in sorted(bundle.namelist()):
        if _wanted(PurePosixPath(name)):
            with bundle.open(name) as raw:
                yield name, io.TextIOWrapper(raw, encoding="utf-8").read()


def _bundle_list(files: Iterator[tuple[str, str]], origin: str) -> dict[str, Any]:
    items: list[Any] = []
    found = 0
    for name, text in files:
        found += 1
        document = parse_text(text, name)
        if not isinstance(document, Mapping):
            continue
        if str(document.get("kind", "")).endswith("List"):
            items.extend(document.get("items") or ())
        else:
            items.append(document)
    if not found:
        plurals = ", ".join(sorted(p.removesuffix(".yaml") for p in _PLURALS))
        raise ValueError(
            f"{origin}: not a support bundle corral can read (no yamls/…/<plural>.yaml of {plurals})"
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def normalise_bundle(document: dict[str, Any]) -> dict[str, Any]:
    """Undo the exporter's quirks (module docstring) throughout `document`."""
    normalised: dict[str, Any] = _normalise(document)
    return normalised


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _normalise(item) for key, item in value.items() if not (item == "null" or item is None)}
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
