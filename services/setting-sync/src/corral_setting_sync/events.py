"""Why a setting is pending, as a Warning Event on the Setting: `kubectl describe setting
taint-toleration` says "3 attached volumes: pvc-a, pvc-b, pvc-c" without corral's CLI.

The Event's name is a hash of the Setting, the reason and the message, so the same blocker
reported again is the same Event: the actuator counts the later occurrence on it (count,
lastTimestamp), as Kubernetes' event recorder deduplicates, and a changed blocker is a new Event.
"""

from __future__ import annotations

import hashlib
import time

from corral_model.envelopes import Command, Target, Verb, new_command
from corral_model.kinds import KINDS
from corral_model.longhorn import Setting
from corral_setting_sync.commands import SERVICE
from corral_setting_sync.reasons import Reason

WARNING = "Warning"
MAX_MESSAGE = 1024  # `kubectl get events` and event sinks truncate longer ones anyway

EVENT_REASON = {
    Reason.ATTACHED_VOLUMES: "AttachedVolumes",
    Reason.RWX_VOLUMES_ATTACHED: "RWXVolumesAttached",
    Reason.ENGINE_INSTANCES: "EngineInstances",
    Reason.INVALID_VALUE: "InvalidValue",
    Reason.NODE_NOT_READY: "NodeNotReady",
}
"""The verdicts an Event reports (what blocks a setting), with the Event's reason for each."""


def event_name(setting: Setting, reason: str, message: str) -> str:
    meta = setting.metadata
    identity = "\x00".join((meta.namespace, meta.name, meta.uid, reason, message))
    return f"{meta.name}.{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def _timestamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def pending_event(setting: Setting, verdict: Reason, message: str, count: int, now: float) -> Command:
    """Create (or, when recorded before, count again) the Warning Event naming what blocks `setting`;
    `count`: which occurrence this is (it makes a later occurrence another command id)."""
    reason = EVENT_REASON[verdict]
    meta = setting.metadata
    name = event_name(setting, reason, message)
    kind = KINDS["setting"]
    involved = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "namespace": meta.namespace,
        "name": meta.name,
    }
    if meta.uid:
        involved["uid"] = meta.uid
    stamp = _timestamp(now)
    return new_command(
        service=SERVICE,
        verb=Verb.CREATE,
        target=Target(kind="Event", namespace=meta.namespace, name=name),
        body={
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": meta.namespace},
            "involvedObject": involved,
            "type": WARNING,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "source": {"component": SERVICE},
            "reportingComponent": SERVICE,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": count,
        },
        reason=f"event: {reason}",
        created_at=now,
    )
