"""Longhorn's refusal to disable the v2 data engine on a node still in use by it (T4.6: labelling
a node that hosts a v2 volume's engine or replica with `node.longhorn.io/disable-v2-data-engine=true`
is rejected, "cannot disable v2 data engine"), as an emulator admission hook on Kubernetes nodes.

Read from the cluster as the API server holds it, like the other webhooks (admission.py).
"""

from __future__ import annotations

from corral_sandbox.simulator.admission import LONGHORN, AdmissionRegistry, ClusterLookup, Obj
from corral_sandbox.simulator.im_nodes import DISABLE_V2_LABEL
from corral_sandbox.simulator.settings import as_bool


def _disables_v2(obj: Obj | None) -> bool:
    labels = (obj or {}).get("metadata", {}).get("labels", {}) or {}
    return as_bool(str(labels.get(DISABLE_V2_LABEL, "")))


class V2DisableWebhook:
    def __init__(self, cluster: ClusterLookup, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace

    def install(self, registry: AdmissionRegistry) -> None:
        registry.register_admission("", "nodes", self.node, name="validator.longhorn.io", code=400)

    def node(self, operation: str, old: Obj | None, new: Obj | None) -> str | None:
        if operation not in ("CREATE", "UPDATE") or new is None:
            return None
        if not _disables_v2(new) or _disables_v2(old):
            return None
        name = new["metadata"]["name"]
        users = self._v2_users(name)
        if users:
            return f"cannot disable v2 data engine on node {name}: {users[0]} is on it"
        return None

    def _v2_users(self, node: str) -> list[str]:
        users = []
        for plural in ("engines", "replicas"):
            for obj in self._cluster.list(LONGHORN, plural, self._namespace):
                spec = obj.get("spec", {})
                if spec.get("dataEngine") == "v2" and spec.get("nodeID") == node:
                    users.append(f"v2 {plural[:-1]} {obj['metadata']['name']}")
        return sorted(users)
