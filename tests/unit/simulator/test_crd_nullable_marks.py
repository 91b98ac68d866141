"""The sandbox's Longhorn CRDs (deploy/crds/longhorn-*.yaml) carry exactly the `nullable: true`
marks of the Longhorn release the simulator plays (v1.10), as nullable-fields.md lists them.

The emulator keeps a literal `null` only where these marks say so (as the apiextensions server
does), so a mark missing here would silently erase a null the simulator writes, and a mark too many
would let through a null real Longhorn never sends.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from corral_sandbox.emulator.crds import default_crd_dir
from corral_sandbox.simulator.config import ImageProfile
from tests.fixtures.corpus import NULLABLE_FIELDS

KINDS = ("Volume", "Engine", "Replica", "EngineImage", "Node", "Setting", "InstanceManager")
_PATH = re.compile(r"`([A-Za-z][A-Za-z.{}\[\]]*)`")


def release_paths(release: str) -> dict[str, set[str]]:
    """Kind → the nullable paths of the `- **v1.10.x …**` bullet (the full list at that release)."""
    section = NULLABLE_FIELDS.read_text().split("## Requested kinds", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    kind = ""
    for line in section.splitlines():
        if line.startswith("### "):
            kind = line[4:].strip()
        elif kind and line.startswith(f"- **{release}"):
            out[kind] = set(_PATH.findall(line.split(":", 1)[1]))
    return out


def schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Every path of `schema` marked nullable, in nullable-fields.md's notation (`a{}`, `a[]`)."""
    found: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        if sub.get("nullable"):
            found.add(path)
        found |= schema_paths(sub, path)
        if isinstance(sub.get("additionalProperties"), dict):
            found |= schema_paths(sub["additionalProperties"], path + "{}")
        if isinstance(sub.get("items"), dict):
            found |= schema_paths(sub["items"], path + "[]")
    return found


def crd_schema(kind: str) -> dict[str, Any]:
    directory = default_crd_dir()
    assert directory is not None
    for path in directory.glob("longhorn-*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if doc["spec"]["names"]["kind"] == kind:
            return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {kind}")


def test_the_simulator_plays_v1_10() -> None:
    assert ImageProfile().version.startswith("v1.10."), "update the CRDs' marks with the release"


@pytest.mark.parametrize("kind", KINDS)
def test_crd_marks_are_the_release_ones(kind: str) -> None:
    expected = release_paths("v1.10.x")
    assert kind in expected or kind == "Setting"
    assert schema_paths(crd_schema(kind)) == expected.get(kind, set())
