"""The v2 live upgrade's admission rules (§5.3) as emulator admission hooks: the two upgrade CRs
(corral's webhook, `upgrades.v2.corral.longhorn.io`) and the attach/target rules on Longhorn volumes
(`volumes.v2.corral.longhorn.io`), exactly the rules corral's webhook server answers a real cluster
with (`corral_v2admission`, never re-implemented here).

The facts the rules ask for are read from the API server's store, and only when asked: a v1
volume's update reads nothing. Longhorn serialises manager creates with a Lease lock; here every
write is judged and committed in one synchronous step of the emulator's event loop, which serialises
them already. Status writes are not judged (the hooks see only the main resource, as the chart's
ValidatingWebhookConfiguration does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from corral_model.kinds import CORRAL_GROUP
from corral_sandbox.simulator.admission import LONGHORN, AdmissionRegistry, ClusterLookup, Obj
from corral_sandbox.simulator.settings import DEFAULTS
from corral_v2admission import (
    DEFAULT_IM_IMAGE,
    MANAGERS,
    NODE_UPGRADES,
    VOLUMES,
    admit,
    condition_true,
    webhook_name,
)


class StoreFacts:
    """`UpgradeFacts` answered from the API server's current objects."""

    def __init__(self, cluster: ClusterLookup, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace

    def manager_states(self) -> Iterable[tuple[str, str]]:
        for manager in self._cluster.list(CORRAL_GROUP, MANAGERS, self._namespace):
            status = manager.get("status") or {}
            yield str(manager["metadata"]["name"]), str(status.get("state") or "")

    def longhorn_node_count(self) -> int:
        return len(self._cluster.list(LONGHORN, "nodes", self._namespace))

    def upgrade_requested(self, node: str) -> bool | None:
        obj = self._cluster.get(LONGHORN, "nodes", self._namespace, node) if node else None
        return None if obj is None else condition_true(obj)

    def default_instance_manager_image(self) -> str:
        setting = self._cluster.get(LONGHORN, "settings", self._namespace, DEFAULT_IM_IMAGE)
        return str(setting.get("value", "")) if setting else DEFAULTS.get(DEFAULT_IM_IMAGE, "")


class V2UpgradeAdmission:
    def __init__(self, cluster: ClusterLookup, namespace: str) -> None:
        self._facts = StoreFacts(cluster, namespace)

    def install(self, registry: AdmissionRegistry) -> None:
        for group, resource in ((CORRAL_GROUP, MANAGERS), (CORRAL_GROUP, NODE_UPGRADES), (LONGHORN, VOLUMES)):
            registry.register_admission(
                group, resource, self.hook(resource), name=webhook_name(resource), code=422
            )

    def hook(self, resource: str) -> Callable[[str, Obj | None, Obj | None], tuple[int, str] | None]:
        def judge(operation: str, old: Obj | None, new: Obj | None) -> tuple[int, str] | None:
            denial = admit(resource, operation, old, new, self._facts)
            return None if denial is None else (denial.code, denial.message)

        return judge
