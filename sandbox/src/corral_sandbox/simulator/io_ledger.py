"""SIM-IO: a per-volume I/O heartbeat, so "stays attached and serving" is measured, not assumed.

After every round the ledger looks at each volume as the round left it and asks whether it could
serve I/O now. From the first time a volume is seen attached, every interval in which it could not
— while it is attached or still asked to be (`spec.nodeID` set) — is a *gap*, with its start, its end
and why:

* `detached`: asked to be attached but not attached (a crash's detach and reattach);
* `engine-down`: attached but its engine is neither running nor suspended;
* `suspended`: a v2 switch-over holds the initiator (from the moment the instance handler begins to
  suspend it to the resume);
* `target-im-gone`: the instance manager serving its target (a v2 engine's target node's v2 IM, a
  v1 engine's own IM) is not running.

Every time a volume leaves `attached` counts as a detach; `crashDetaches` counts those while it was
still asked to be attached. Times are simulated seconds (clock.py) of the round that saw the change;
the rounds between a write and its echo are why a gap can exceed the data plane's durations
(`SimConfig.switchover_io_gap_budget`). Read at `GET /_sandbox/io` (control.py) or
`io_report(memory, now)`; it survives a simulator restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral_sandbox.simulator.io_record import Gap, VolumeIO
from corral_sandbox.simulator.objects import engine_name
from corral_sandbox.simulator.view import ClusterView, Obj, deleting, spec, status

if TYPE_CHECKING:
    from corral_sandbox.simulator.config import SimConfig
    from corral_sandbox.simulator.context import Memory, ReconcileContext


def _running_managers(view: ClusterView) -> tuple[set[str], set[str]]:
    """(names of running IMs, nodes with a running v2 IM)."""
    names: set[str] = set()
    v2_nodes: set[str] = set()
    for im in view.all("instancemanager"):
        if status(im).get("currentState") != "running" or deleting(im):
            continue
        names.add(im["metadata"]["name"])
        if spec(im).get("dataEngine") == "v2":
            v2_nodes.add(str(spec(im).get("nodeID", "")))
    return names, v2_nodes


def why_not_serving(
    engine: Obj | None, running_ims: set[str], v2_nodes: set[str], suspending: bool = False
) -> str:
    """Why an attached volume with this engine cannot serve I/O ("" when it can). `suspending`: the
    instance handler has begun suspending it (its I/O is held from then)."""
    if engine is None or status(engine).get("currentState") not in ("running", "suspended"):
        return "engine-down"
    if status(engine).get("currentState") == "suspended" or suspending:
        return "suspended"
    if spec(engine).get("dataEngine") == "v2":
        target = status(engine).get("currentTargetNodeIDForLiveUpgrade") or spec(engine).get("nodeID", "")
        return "" if target in v2_nodes else "target-im-gone"
    return "" if status(engine).get("instanceManagerName", "") in running_ims else "target-im-gone"


def observe_io(ctx: ReconcileContext) -> None:
    ledger = ctx.memory.io
    running_ims, v2_nodes = _running_managers(ctx.view)
    seen: set[str] = set()
    for volume in ctx.view.all("volume"):
        name = volume["metadata"]["name"]
        seen.add(name)
        attached = status(volume).get("state") == "attached"
        record = ledger.get(name)
        if record is None:
            if not attached:
                continue
            record = ledger[name] = VolumeIO()
        wanted = bool(spec(volume).get("nodeID")) and not deleting(volume)
        if record.attached and not attached:
            record.detaches += 1
            record.crash_detaches += 1 if wanted else 0
        record.attached = attached
        if attached:
            engine = engine_name(name)
            suspending = f"v2-suspend/{engine}" in ctx.memory.timers
            reason = why_not_serving(ctx.view.get("engine", engine), running_ims, v2_nodes, suspending)
        else:
            reason = "detached" if wanted else ""
        record.serving = attached and not reason
        _note(record, reason, ctx.now)
    for name, record in ledger.items():
        if name not in seen:
            record.attached = record.serving = False
            _note(record, "", ctx.now)


def _note(record: VolumeIO, reason: str, now: float) -> None:
    gap = record.open_gap()
    if not reason:
        if gap is not None:
            gap.end = now
        return
    if gap is None:
        record.gaps.append(Gap(now, None, [reason]))
    elif gap.reasons[-1] != reason:
        gap.reasons.append(reason)


def data_plane(config: SimConfig) -> dict[str, float]:
    """The configured v2 data-plane durations and the bounds derived from them (README), for a
    reader of the ledger in another process (a bench's lower bound, a scenario's budget)."""
    return {
        "v2TargetCreateSeconds": config.v2_target_create_seconds,
        "v2SuspendSeconds": config.v2_suspend_seconds,
        "v2SwitchSeconds": config.v2_switch_seconds,
        "v2ResumeSeconds": config.v2_resume_seconds,
        "v2InstanceManagerStartSeconds": config.v2_im_start_seconds,
        "rebuildSeconds": config.rebuild_seconds,
        "snapshotSeconds": config.snapshot_seconds,
        "switchoverSeconds": config.switchover_seconds,
        "switchoverIoGapBudget": config.switchover_io_gap_budget,
    }


def io_report(memory: Memory, now: float) -> dict[str, Any]:
    """Per volume: attached, serving, detaches, every gap (start, end — null while open — seconds,
    reasons) and the longest gap, in simulated seconds."""
    ledger = memory.io
    volumes: dict[str, Any] = {}
    for name in sorted(ledger):
        record = ledger[name]
        gaps: list[dict[str, Any]] = [
            {"start": g.start, "end": g.end, "seconds": g.seconds(now), "reasons": list(g.reasons)}
            for g in record.gaps
        ]
        volumes[name] = {
            "attached": record.attached,
            "serving": record.serving,
            "detaches": record.detaches,
            "crashDetaches": record.crash_detaches,
            "gaps": gaps,
            "longestGap": max((g.seconds(now) for g in record.gaps), default=0.0),
        }
    return {"now": now, "volumes": volumes}
