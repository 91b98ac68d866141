"""The admission rules of the v2 data-engine live upgrade (longhorn-behaviour.md §5.3), once: the
sandbox plays them as admission hooks and corral's webhook server (corral_v2_admission) answers
kube-apiserver with them, so both refuse the same requests with the same words.

Pure: no I/O. The caller answers the few questions the rules ask (`UpgradeFacts`) and serialises
manager creates; the rules, Longhorn's messages and corral's deliberate differences are listed in
services/v2-upgrade/README.md ("Admission").
"""

from corral_v2admission.denial import Denial, bad_request, internal_error, invalid
from corral_v2admission.facts import (
    DEFAULT_IM_IMAGE,
    TERMINAL_STATES,
    UPGRADE_REQUESTED,
    KnownFacts,
    UpgradeFacts,
    condition_true,
)
from corral_v2admission.rules import (
    MANAGERS,
    NODE_UPGRADES,
    RESOURCES,
    UPGRADES_WEBHOOK,
    VOLUMES,
    VOLUMES_WEBHOOK,
    admit,
    webhook_name,
)

__all__ = [
    "DEFAULT_IM_IMAGE",
    "MANAGERS",
    "NODE_UPGRADES",
    "RESOURCES",
    "TERMINAL_STATES",
    "UPGRADES_WEBHOOK",
    "UPGRADE_REQUESTED",
    "VOLUMES",
    "VOLUMES_WEBHOOK",
    "Denial",
    "KnownFacts",
    "UpgradeFacts",
    "admit",
    "bad_request",
    "condition_true",
    "internal_error",
    "invalid",
    "webhook_name",
]
