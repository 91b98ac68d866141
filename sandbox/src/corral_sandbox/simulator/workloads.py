"""SIM-K8S: the Longhorn workloads exist. Plays the chart's install (longhorn-manager, the UI, the
driver deployer), the driver deployer (the CSI plugin DaemonSet and the four CSI Deployments) and
the engine-image controller's DaemonSet per EngineImage (removed with its EngineImage; its node
selector follows `system-managed-components-node-selector` while every volume is detached, §1.5).

Only creation is done here, from the settings current at that moment (workload_objects.py). Keeping
existing templates in line with changed danger-zone settings is the setting controller's job, which
corral's setting-sync replaces; rolling pods after a template change is rollouts.py's.
"""

from __future__ import annotations

from corral_sandbox.simulator import workload_objects as wo
from corral_sandbox.simulator.component_settings import current_settings
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.view import Obj, deleting, spec, status


def reconcile_workloads(ctx: ReconcileContext) -> None:
    if not ctx.config.kube_workloads:
        return
    view, ns = ctx.view, ctx.namespace
    settings = None
    wanted: list[tuple[str, str]] = [
        ("daemonset", wo.MANAGER_DS),
        ("deployment", wo.UI),
        ("deployment", wo.DRIVER_DEPLOYER),
        ("daemonset", wo.CSI_PLUGIN),
        *(("deployment", name) for name in wo.CSI_DEPLOYMENTS),
    ]
    for kind, name in wanted:
        if view.get(kind, name) is not None:
            continue
        settings = settings or current_settings(view.setting)
        if name in wo.UNMANAGED:
            obj = wo.unmanaged(name, ns)
        elif name == wo.CSI_PLUGIN:
            obj = wo.csi_plugin(settings, ns)
        else:
            obj = wo.csi_deployment(name, settings, ns, ctx.config.csi_deployment_replicas)
        ctx.create(kind, obj, "Longhorn workload missing")
    images = {}
    for ei in view.all("engineimage"):
        if deleting(ei):
            continue
        name = wo.engine_image_daemonset_name(ei["metadata"]["name"])
        images[name] = ei
        if view.get("daemonset", name) is None:
            settings = settings or current_settings(view.setting)
            ctx.create("daemonset", wo.engine_image_daemonset(ei, settings, ns), "engine image DaemonSet")
    # committed states only: a detach this round's volume controller has just made is not one yet
    detached = all(status(ctx.committed("volume", v)).get("state") == "detached" for v in view.all("volume"))
    for ds in view.all("daemonset"):
        name = ds["metadata"]["name"]
        if not name.startswith("engine-image-") or deleting(ds):
            continue
        if name not in images:
            ctx.delete("daemonset", ds, "its engine image is gone")
        elif detached:
            settings = settings or current_settings(view.setting)
            with ctx.isolated("daemonset", ds):
                _engine_image_node_selector(ctx, ds, dict(settings.node_selector))


def _engine_image_node_selector(ctx: ReconcileContext, ds: Obj, selector: dict[str, str]) -> None:
    """§1.5: the engine-image controller patches the node selector into its DaemonSet only while
    every volume is detached (nil and empty count as equal)."""
    template = spec(ds).get("template") or {}
    held = (template.get("spec") or {}).get("nodeSelector") or {}
    if held != selector:
        ctx.patch_spec(
            "daemonset",
            ds,
            {
                "template": {
                    **template,
                    "spec": {**(template.get("spec") or {}), "nodeSelector": selector or None},
                }
            },
            "engine image DaemonSet node selector",
        )
