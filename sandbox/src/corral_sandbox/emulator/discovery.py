"""Discovery documents (`/api`, `/apis`, group and group-version resource lists, `/version`).

kubernetes-asyncio's typed models require every field the real documents carry, so the shapes here
follow the apiserver's exactly, including the fields nobody reads.
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.emulator.resources import ResourceType

KUBE_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-corral-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _groups(types: list[ResourceType]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in types:
        if rt.group:
            versions = groups.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
    return groups


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(types: list[ResourceType]) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, versions) for name, versions in sorted(_groups(types).items())],
    }


def api_group(types: list[ResourceType], group: str) -> dict[str, Any] | None:
    versions = _groups(types).get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def resource_list(types: list[ResourceType], group: str, version: str) -> dict[str, Any] | None:
    served = [rt for rt in types if rt.group == group and rt.version == version]
    if not served:
        return None
    resources: list[dict[str, Any]] = []
    for rt in sorted(served, key=lambda r: r.plural):
        resources.extend(rt.discovery())
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
