"""The Kubernetes Events that report a gate decision, as core/v1 Event bodies.

Longhorn records `FailedUpgradePreCheck` (Warning) or `PassedUpgradeCheck` (Normal, "pre-upgrade
check passed"), and a Warning with reason `Upgrade` when the check is bypassed. corral attaches them
to the `current-longhorn-version` Setting, the object the decision is about, so
`kubectl describe setting current-longhorn-version` shows the history of upgrade attempts.

Event names are deterministic (a hash of who decided what), so a crash-looping service asks for
the same Event every time and the duplicates collapse instead of flooding the namespace.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import msgspec

from corral_model.kinds import KINDS
from corral_upgradepath.cluster import CURRENT_VERSION_SETTING
from corral_upgradepath.decision import PASSED_MESSAGE, REASON_FAILED, REASON_PASSED, GateDecision

NORMAL = "Normal"
WARNING = "Warning"
# The API server accepts longer messages, but `kubectl get events` and event sinks truncate anyway.
MAX_MESSAGE = 1024


class GateEvent(msgspec.Struct, frozen=True, kw_only=True):
    type: str  # Normal | Warning
    reason: str
    message: str


def decision_events(decision: GateDecision) -> tuple[GateEvent, ...]:
    """The bypass warnings first, then the outcome, in the order Longhorn emits them."""
    outcome = (
        GateEvent(type=NORMAL, reason=REASON_PASSED, message=PASSED_MESSAGE)
        if decision.allowed
        else GateEvent(type=WARNING, reason=REASON_FAILED, message=decision.reason)
    )
    warnings = tuple(GateEvent(type=WARNING, reason=w.reason, message=w.message) for w in decision.warnings)
    return (*warnings, outcome)


def _timestamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def event_name(component: str, decision: GateDecision, event: GateEvent) -> str:
    identity = [
        component,
        decision.current_version,
        decision.target_version,
        event.type,
        event.reason,
        event.message,
    ]
    digest = hashlib.sha256(msgspec.json.encode(identity)).hexdigest()[:16]
    return f"{CURRENT_VERSION_SETTING}.{digest}"


def event_body(
    event: GateEvent,
    *,
    name: str,
    namespace: str,
    component: str,
    now: float,
    setting_uid: str = "",
) -> dict[str, Any]:
    setting = KINDS["setting"]
    involved: dict[str, Any] = {
        "apiVersion": setting.api_version,
        "kind": setting.kind,
        "namespace": namespace,
        "name": CURRENT_VERSION_SETTING,
    }
    if setting_uid:
        involved["uid"] = setting_uid
    stamp = _timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:MAX_MESSAGE],
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
