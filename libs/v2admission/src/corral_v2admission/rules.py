"""One entry point for every rule: which resource, which operation, the old and new object, and the
facts. The sandbox's hooks and the webhook server both call `admit`, so they cannot disagree."""

from __future__ import annotations

from corral_v2admission.denial import Denial
from corral_v2admission.facts import UpgradeFacts
from corral_v2admission.objects import Obj
from corral_v2admission.upgrades import (
    manager_create,
    manager_update,
    node_upgrade_create,
    node_upgrade_update,
)
from corral_v2admission.volumes import volume_create, volume_update

MANAGERS = "dataengineupgrademanagers"
NODE_UPGRADES = "nodedataengineupgrades"
VOLUMES = "volumes"
RESOURCES = (MANAGERS, NODE_UPGRADES, VOLUMES)


def admit(
    resource: str, operation: str, old: Obj | None, new: Obj | None, facts: UpgradeFacts
) -> Denial | None:
    """The denial of one request, or None to allow it. DELETE and unknown resources are allowed."""
    if operation == "CREATE" and new is not None:
        if resource == MANAGERS:
            return manager_create(new, facts)
        if resource == NODE_UPGRADES:
            return node_upgrade_create(new)
        if resource == VOLUMES:
            return volume_create(new, facts)
    if operation == "UPDATE" and old is not None and new is not None:
        if resource == MANAGERS:
            return manager_update(old, new)
        if resource == NODE_UPGRADES:
            return node_upgrade_update(old, new)
        if resource == VOLUMES:
            return volume_update(old, new, facts)
    return None


UPGRADES_WEBHOOK = "upgrades.v2.corral.longhorn.io"
"""The webhook's name for the two upgrade CRs (in kube-apiserver's denial message)."""
VOLUMES_WEBHOOK = "volumes.v2.corral.longhorn.io"
"""The webhook's name for Longhorn volumes."""


def webhook_name(resource: str) -> str:
    return VOLUMES_WEBHOOK if resource == VOLUMES else UPGRADES_WEBHOOK
