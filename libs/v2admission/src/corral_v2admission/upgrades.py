"""The admission rules of corral's two upgrade CRs (longhorn-behaviour.md §5.3), in Longhorn's order
and with its messages: DataEngineUpgradeManager create/update and NodeDataEngineUpgrade create/update.

corral's additions: the manager's `spec.startTime` must be an RFC 3339 time (it stays mutable: the
v2-upgrade service ignores it once the first node has started, V2U-18), and the node upgrade's
`spec.snapshotBeforeUpgrade` is immutable like the other four (it is fixed when the attempt is
created, so a change mid-flight cannot reach the node in progress).
"""

from __future__ import annotations

from datetime import datetime

from corral_v2admission.denial import Denial, bad_request, invalid
from corral_v2admission.facts import TERMINAL_STATES, UpgradeFacts
from corral_v2admission.objects import Obj, data_engine, section, spec_str, string_list

V2 = "v2"
ANOTHER_IN_PROGRESS = "another dataEngineUpgradeManager is in progress"
SINGLE_NODE = "single-node cluster is not supported for data engine live upgrade"
NODE_UPGRADE_FIELDS = ("nodeID", "dataEngine", "instanceManagerImage", "dataEngineUpgradeManager")
NODE_UPGRADE_IMMUTABLE = (*NODE_UPGRADE_FIELDS, "snapshotBeforeUpgrade")


def unsupported_engine(engine: str) -> Denial:
    return invalid(f"data engine {engine} is not supported for data engine live upgrade", "spec.dataEngine")


def _start_time(obj: Obj | None) -> Denial | None:
    value = section(obj, "spec").get("startTime")
    if value in (None, ""):
        return None
    text = str(value)
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return invalid(f"spec.startTime {text} is not an RFC 3339 time", "spec.startTime")
    if "T" not in text.upper():
        return invalid(f"spec.startTime {text} is not an RFC 3339 time", "spec.startTime")
    return None


def manager_create(new: Obj, facts: UpgradeFacts) -> Denial | None:
    """Serialising concurrent creates (Longhorn's Lease lock) is the caller's: this rule must run,
    and its answer be acted on, under one lock per cluster."""
    if any(state not in TERMINAL_STATES for _, state in facts.manager_states()):
        return bad_request(ANOTHER_IN_PROGRESS)
    if facts.longhorn_node_count() < 2:
        return invalid(SINGLE_NODE)
    if data_engine(new) != V2:
        return unsupported_engine(data_engine(new))
    return _start_time(new)


def manager_update(old: Obj, new: Obj) -> Denial | None:
    if data_engine(new) != V2:
        return unsupported_engine(data_engine(new))
    if data_engine(old) != data_engine(new):
        return invalid("spec.dataEngine field is immutable", "spec.dataEngine")
    if string_list(section(old, "spec").get("nodes")) != string_list(section(new, "spec").get("nodes")):
        return invalid("nodes field is immutable", "spec.nodes")
    return _start_time(new)


def node_upgrade_create(new: Obj) -> Denial | None:
    if not spec_str(new, "nodeID"):
        return invalid("nodeID is required", "spec.nodeID")
    if data_engine(new) != V2:
        return unsupported_engine(data_engine(new))
    if not spec_str(new, "instanceManagerImage"):
        return invalid("instanceManagerImage is required", "spec.instanceManagerImage")
    if not spec_str(new, "dataEngineUpgradeManager"):
        return invalid("dataEngineUpgradeManager is required", "spec.dataEngineUpgradeManager")
    return None


def node_upgrade_update(old: Obj, new: Obj) -> Denial | None:
    old_spec, new_spec = section(old, "spec"), section(new, "spec")
    for key in NODE_UPGRADE_IMMUTABLE:
        if _plain(old_spec.get(key)) != _plain(new_spec.get(key)):
            return invalid(f"{key} field is immutable", f"spec.{key}")
    return None


def _plain(value: object) -> object:
    """Absent and `null` read as the zero value, as in Go (`false` for the snapshot flag)."""
    return None if value in (None, "", False) else value
