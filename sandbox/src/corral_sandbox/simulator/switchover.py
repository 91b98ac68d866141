"""SIM-V2: the volume controller's side of a v2 target switch-over (longhorn-behaviour.md §5.5, last
part), one step per round, while an attached v2 volume has `spec.targetNodeIDForLiveUpgrade` set:

1. the volume's `spec.image` and target are copied to the engine's spec;
2. once the engine reports its replacement target created (v2_engine.py), `desireState: suspended`;
3. once the engine's current target is the one asked for and it is suspended, `desireState: running`
   (resume);
4. once it runs there: `status.currentTargetNodeIDForLiveUpgrade` = the target, and
   `status.currentImage = spec.image` when the engine runs that image.

The volume stays attached to `spec.nodeID` throughout: the initiator (the frontend) never leaves it;
only the target moves, and the engine CR follows it (`spec`/`status.currentTargetNodeIDForLiveUpgrade`,
`status.targetIP`). Clearing the volume's target clears the engine's and then the volume's current
target (the target is back on the attached node by then; if it is not, it is switched back first).
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.scope import VolumeScope
from corral_sandbox.simulator.v2_engine import current_target, desired_target
from corral_sandbox.simulator.view import spec, status


def step_switchover(ctx: ReconcileContext, scope: VolumeScope, wanted: dict[str, Any]) -> None:
    """One step for an attached v2 volume whose engine is running or suspended."""
    engine = scope.engine
    assert engine is not None
    vspec, espec, estatus = spec(scope.volume), spec(engine), status(engine)
    target = str(vspec.get("targetNodeIDForLiveUpgrade") or "")
    image = str(vspec.get("image", ""))
    copy: dict[str, Any] = {}
    if (espec.get("targetNodeIDForLiveUpgrade") or "") != target:
        copy["targetNodeIDForLiveUpgrade"] = target
    if target and espec.get("image") != image:
        copy["image"] = image
    if copy:
        ctx.patch_spec("engine", engine, copy, "live upgrade: volume target and image to the engine")
        return
    current = estatus.get("currentState")
    if desired_target(engine) != current_target(engine):
        if (
            current == "running"
            and estatus.get("targetInstanceReplacementCreated")
            and espec.get("desireState") != "suspended"
        ):
            ctx.patch_spec(
                "engine", engine, {"desireState": "suspended"}, "live upgrade: suspend to switch target"
            )
        return
    if current == "suspended" or espec.get("desireState") == "suspended":
        ctx.patch_spec("engine", engine, {"desireState": "running"}, "live upgrade: resume on the new target")
        return
    if current != "running" or (estatus.get("currentTargetNodeIDForLiveUpgrade") or "") != target:
        return
    wanted["currentTargetNodeIDForLiveUpgrade"] = target
    if estatus.get("currentImage") == image:
        wanted["currentImage"] = image
