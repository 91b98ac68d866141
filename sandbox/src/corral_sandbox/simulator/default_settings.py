"""The `longhorn-default-setting` ConfigMap and longhorn-manager's propagation of it into Setting
values (DZ-12, Longhorn's T3.6).

The chart writes the customised settings as YAML under `data["default-setting.yaml"]`
(`taint-toleration: "key1=value1:NoSchedule"`, one setting per line). When the ConfigMap changes
(and when the manager starts), the manager sets every listed Setting whose value differs, through
the API server, so the setting webhooks judge the new value as they judge a user's. A value the
webhooks refuse, a line that is not YAML, a setting the manager owns (read-only) or one Longhorn
does not know are skipped, as the manager logs and skips them; the other lines still apply.
Danger-zone settings are only *written* here: applying them to the components stays the setting
controller's job (corral's setting-sync), deferred while volumes are attached.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from corral_dangerzone import is_danger_zone
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.settings import DEFAULTS, READ_ONLY
from corral_sandbox.simulator.view import Obj
from corral_sandbox.simulator.writes import Write

CONFIGMAP = "longhorn-default-setting"
LONGHORN = "longhorn"
KEY = "default-setting.yaml"


def configmap(namespace: str, values: dict[str, str] | None = None) -> Obj:
    text = yaml.safe_dump(dict(values or {}), default_flow_style=False) if values else ""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": LONGHORN},
        },
        "data": {KEY: text},
    }


def customized(obj: Obj) -> dict[str, str]:
    """The ConfigMap's settings as strings; an unreadable document yields nothing."""
    text = (obj.get("data") or {}).get(KEY) or ""
    try:
        parsed: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    values: dict[str, str] = {}
    for name, value in parsed.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        values[str(name)] = str(value)
    return values


def reconcile_default_settings(ctx: ReconcileContext) -> None:
    if not ctx.config.kube_workloads:
        return
    cm = ctx.view.get("configmap", CONFIGMAP)
    if cm is None:
        ctx.create("configmap", configmap(ctx.namespace), "the chart's default-setting ConfigMap")
        return
    version = str(cm["metadata"].get("resourceVersion", ""))
    if ctx.memory.timers.get(f"default-setting/{version}") is not None:
        ctx.touched.add(f"default-setting/{version}")
        return
    # remembered as a timer so a controller restart (memory lost) re-applies it, as a new manager does
    ctx.memory.timers[f"default-setting/{version}"] = ctx.now
    ctx.touched.add(f"default-setting/{version}")
    for name, value in sorted(customized(cm).items()):
        if name in READ_ONLY or (name not in DEFAULTS and not is_danger_zone(name)):
            continue
        setting = ctx.view.get("setting", name)
        if setting is None or str(setting.get("value", "")) == value:
            continue
        observed = copy.deepcopy(setting)
        reason = "longhorn-default-setting changed"
        ctx.writes.append(Write("patch", "setting", name, {"value": value}, reason, observed=observed))
        setting["value"] = value
