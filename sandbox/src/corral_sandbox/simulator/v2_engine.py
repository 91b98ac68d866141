"""SIM-V2: the instance handler's side of a v2 engine, whose initiator (the frontend) and target may
run on different nodes (longhorn-behaviour.md §5.5, last part).

The engine's `spec.nodeID` is where the initiator runs — the node the volume is attached to — and it
never moves. Its target is on `status.currentTargetNodeIDForLiveUpgrade`, or on its own node when
that is empty. When the spec asks for another target (`spec.targetNodeIDForLiveUpgrade`, copied from
the volume by switchover.py), each step takes its configured duration:

1. a replacement target is created in the running v2 IM of the new node
   (`status.targetInstanceReplacementCreated`; never on a node blocked by SimFaults.block_target —
   the stalled relocation of V2U-16 — nor on one without a running v2 IM);
2. `desireState: suspended` (the volume controller's request) → `currentState: suspended`;
3. suspended → the initiator switches to the new target: `currentTargetNodeIDForLiveUpgrade`,
   `targetIP`, `currentImage` (the image the engine spec asks for) follow;
4. `desireState: running` again → `currentState: running`.

With the target back on its own node, clearing the spec's target clears the current one (nothing
moves). A v2 engine on a node whose `DataEngineUpgradeRequested` is True is not marked `error` when
its IM goes away (§5.4, instance handler); its initiator is recreated in the node's new running v2
IM after `instance_start_seconds`, which then lists it in `status.instanceEngines`.
"""

from __future__ import annotations

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.view import ClusterView, Obj, spec, status

V2 = "v2"
ALIVE = ("running", "suspended")


def is_v2(obj: Obj) -> bool:
    return bool(spec(obj).get("dataEngine", "v1") == V2)


def desired_target(engine: Obj) -> str:
    """The node the engine's target should be on: the live-upgrade target, else its own node."""
    return str(spec(engine).get("targetNodeIDForLiveUpgrade") or spec(engine).get("nodeID", ""))


def current_target(engine: Obj) -> str:
    """The node the engine's target is on now."""
    return str(status(engine).get("currentTargetNodeIDForLiveUpgrade") or spec(engine).get("nodeID", ""))


def v2_target_nodes(view: ClusterView) -> set[str]:
    """Nodes serving a running v2 engine's target away from its initiator: their v2 IM is busy."""
    return {
        current_target(e)
        for e in view.all("engine")
        if is_v2(e) and status(e).get("currentState") in ALIVE and current_target(e) != spec(e).get("nodeID")
    }


def rehome_initiator(ctx: ReconcileContext, engine: Obj, managers: dict[tuple[str, str], Obj]) -> None:
    """The engine's IM went away on an upgrading node: keep the engine, and recreate its initiator
    in the node's running v2 IM once there is one."""
    name = engine["metadata"]["name"]
    manager = managers.get((str(spec(engine).get("nodeID", "")), V2))
    if manager is None:
        return
    im_name = manager["metadata"]["name"]
    if ctx.waited(f"v2-rehome/{name}/{im_name}", ctx.config.instance_start_seconds):
        ip = status(manager).get("ip", "")
        wanted = {"instanceManagerName": im_name, "ip": ip, "storageIP": ip}
        if current_target(engine) == spec(engine).get("nodeID", ""):
            wanted["targetIP"] = ip
        ctx.patch_status(
            "engine", engine, wanted, "v2 engine: initiator recreated in the new instance manager"
        )


def step_v2_engine(ctx: ReconcileContext, engine: Obj, managers: dict[tuple[str, str], Obj]) -> None:
    """One step of a running or suspended v2 engine towards the target its spec asks for."""
    name = engine["metadata"]["name"]
    espec, estatus = spec(engine), status(engine)
    current = estatus.get("currentState", "")
    desire = espec.get("desireState", "")
    wanted_target, held_target = desired_target(engine), current_target(engine)
    if wanted_target != held_target:
        target_im = managers.get((wanted_target, V2))
        if not estatus.get("targetInstanceReplacementCreated"):
            blocked = wanted_target in ctx.memory.blocked_targets
            if (
                target_im is not None
                and not blocked
                and ctx.waited(f"v2-target/{name}/{wanted_target}", ctx.config.v2_target_create_seconds)
            ):
                ctx.patch_status(
                    "engine",
                    engine,
                    {"targetInstanceReplacementCreated": True},
                    "v2 engine: new target created",
                )
        elif current == "suspended" and ctx.waited(
            f"v2-switch/{name}/{wanted_target}", ctx.config.v2_switch_seconds
        ):
            # the resume the volume controller asks for next is timed from the switch
            ctx.start_timer(f"v2-resume/{name}", ctx.config.v2_resume_seconds)
            ctx.patch_status(
                "engine",
                engine,
                {
                    "currentTargetNodeIDForLiveUpgrade": espec.get("targetNodeIDForLiveUpgrade", ""),
                    "targetInstanceReplacementCreated": False,
                    "targetIP": status(target_im).get("ip", "") if target_im is not None else "",
                    "currentImage": espec.get("image", ""),
                },
                f"v2 engine: initiator switched to the target on {wanted_target}",
            )
    elif estatus.get("currentTargetNodeIDForLiveUpgrade", "") != espec.get("targetNodeIDForLiveUpgrade", ""):
        ctx.patch_status(
            "engine",
            engine,
            {"currentTargetNodeIDForLiveUpgrade": espec.get("targetNodeIDForLiveUpgrade", "")},
            "v2 engine: target unchanged, current target follows the spec",
        )
    if (
        desire == "suspended"
        and current == "running"
        and ctx.waited(f"v2-suspend/{name}", ctx.config.v2_suspend_seconds)
    ):
        ctx.patch_status("engine", engine, {"currentState": "suspended"}, "v2 engine suspended")
        if wanted_target != held_target:
            # suspended to switch: the switch is timed from here
            ctx.start_timer(f"v2-switch/{name}/{wanted_target}", ctx.config.v2_switch_seconds)
    elif (
        desire == "running"
        and current == "suspended"
        and ctx.waited(f"v2-resume/{name}", ctx.config.v2_resume_seconds)
    ):
        ctx.patch_status("engine", engine, {"currentState": "running"}, "v2 engine resumed")
