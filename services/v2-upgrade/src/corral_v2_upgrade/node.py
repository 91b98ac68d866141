"""The NodeDataEngineUpgrade state machine (longhorn-behaviour.md §5.5, second table), one pass.

Pure: the view, the CR, the config and `now` in; a `Step` out. Everything it must remember is in
the CR's status (the volumes it listed, each volume's state, the image each had before, the
snapshot it took, an abort in progress), so a fresh decider picks up exactly where the last one
stopped. Every non-terminal state retries: a blocker is written to `status.message` and the CR
stays in its state. The prototype's bugs and how this differs are in the service README.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from corral_model import longhorn as lh
from corral_v2_upgrade import commands as cmd
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.node_guard import NODE_ACTING_STEPS, unfit
from corral_v2_upgrade.states import AbortReason, UpgradeState, is_terminal
from corral_v2_upgrade.step import Step, parse_time
from corral_v2_upgrade.view import V2, UpgradeView, abort_requested

S = UpgradeState
VolumeMap = dict[str, lh.VolumeUpgradeStatus]
_SETTLED = frozenset({S.COMPLETED, S.ERROR})

# Where an abort goes from each state: restore the targets (switching-back), or only wait for the
# replicas deleted on the node to be rebuilt, or nothing to undo.
_ABORT_TO: dict[str, UpgradeState] = {
    S.UNDEFINED: S.ERROR,
    S.INITIALIZING: S.ERROR,
    S.FAILING_REPLICAS: S.REBUILDING_REPLICA,
    S.SWITCHING_OVER: S.SWITCHING_BACK,
    S.UPGRADING_INSTANCE_MANAGER: S.SWITCHING_BACK,
    S.SWITCHING_BACK: S.SWITCHING_BACK,
}


def attached(volume: lh.Volume) -> bool:
    return volume.status.state == "attached"


def detached(volume: lh.Volume) -> bool:
    return volume.status.state == "detached"


def _set(volumes: VolumeMap, name: str, state: str, message: str = "") -> None:
    volumes[name] = msgspec.structs.replace(volumes[name], state=state, message=message)


def _progress(volumes: VolumeMap) -> str:
    done = sum(1 for v in volumes.values() if v.state in _SETTLED)
    return f"{done}/{len(volumes)}"


def _volumes_status(volumes: VolumeMap) -> dict[str, dict[str, object]]:
    return {name: msgspec.to_builtins(v) for name, v in sorted(volumes.items())}


def _transition(
    step: Step, nu: lh.NodeDataEngineUpgrade, state: str, volumes: VolumeMap | None = None
) -> Step:
    step.status["state"] = state
    if nu.status.message:
        step.status["message"] = ""
    if volumes is not None:
        step.status["volumes"] = _volumes_status(volumes)
        step.status["progress"] = _progress(volumes)
    return step


def _write_volumes(step: Step, nu: lh.NodeDataEngineUpgrade, volumes: VolumeMap) -> None:
    if volumes != nu.status.volumes:
        step.status["volumes"] = _volumes_status(volumes)
        step.status["progress"] = _progress(volumes)


def _and_then(
    view: UpgradeView,
    nu: lh.NodeDataEngineUpgrade,
    step: Step,
    state: UpgradeState,
    volumes: VolumeMap,
    now: float,
    first_pass: Callable[[UpgradeView, lh.NodeDataEngineUpgrade, float, Step], Step],
) -> Step:
    """The transition to `state`, with that state's first pass run on the status it records: its
    writes (switching-back: each volume's target asked home) go out with the transition instead of
    a round trip (watch, decide, actuate) after it. Only for writes safe to send before the
    transition is written: if the status patch is refused, the next pass makes the same transition
    and finds them done. (Not the old IM's delete with the move into upgrading-instance-manager:
    an abort caught there must still find the old IM to restore the volumes on.) When the first
    pass would move on again at once (or start an abort), only the transition is made, so every
    state is still recorded."""
    _transition(step, nu, state, volumes)
    ahead = msgspec.structs.replace(
        nu, status=msgspec.structs.replace(nu.status, state=str(state), message="", volumes=volumes)
    )
    following = first_pass(view, ahead, now, Step())
    if following.status.get("state", state) != state:
        return step
    step.actions.extend(following.actions)
    step.status.update(following.status)
    step.blocker = following.blocker
    return step


# The states in which the node's volumes are off its own instance manager (targets moved away, the
# IM replaced, targets on their way home): only the node's `DataEngineUpgradeRequested` keeps their
# engines alive while its IM is gone (§5.4), so a node upgrade deleted here is restored first.
_RESTORE_BEFORE_RELEASE = frozenset({S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK})


def _deleted(nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step | None:
    """A node upgrade being deleted. Where its node's volumes are off the node's own instance
    manager, the restore (an abort) runs first: with the upgrade gone the node controller clears
    the node's flag, and a v2 engine whose instance manager is replaced on a node not flagged is
    marked `error` and its volume detached (§5.4, the instance handler). Then, or at once from any
    other state, v2-upgrade's finalizer comes off and the object goes; the manager starts the node
    again (`_orphaned`). None while the restore carries on."""
    if cmd.NODE_UPGRADE_FINALIZER not in nu.metadata.finalizers:
        return step  # not held by v2-upgrade: it goes as it is
    state = nu.status.state
    if state in _RESTORE_BEFORE_RELEASE:
        return _start_abort(nu, AbortReason.DELETED, step) if not nu.status.abort_reason else None
    step.actions.append(cmd.release_node_upgrade(nu, f"deleted in {state or 'undefined'}", now))
    return step


def step_node(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, config: DeciderConfig, now: float) -> Step:
    state = nu.status.state
    if nu.metadata.deletion_timestamp:
        released = _deleted(nu, now, Step())
        if released is not None:
            return released
    if is_terminal(state):
        # A volume deleted as the attempt ended (its last pass judged on a view that still held
        # it) leaves the plan all the same.
        step = Step()
        _without_leaving_volumes(view, nu, step)
        return step
    step = Step()
    nu = _without_leaving_volumes(view, nu, step)
    aborting = _abort(view, nu, config, now, step)
    if aborting is not None:
        return aborting
    if state in NODE_ACTING_STEPS:
        held = unfit(view, nu.spec.node_id)
        if held:
            return step.wait(held, nu.status.message)
    match state:
        case S.UNDEFINED:
            return _transition(step, nu, S.INITIALIZING)
        case S.INITIALIZING:
            return _initializing(view, nu, now, step)
        case S.FAILING_REPLICAS:
            return _failing_replicas(view, nu, now, step)
        case S.SWITCHING_OVER:
            return _switching_over(view, nu, now, step)
        case S.UPGRADING_INSTANCE_MANAGER:
            return _upgrading_instance_manager(view, nu, now, step)
        case S.SWITCHING_BACK:
            return _switching_back(view, nu, now, step)
        case S.REBUILDING_REPLICA:
            return _rebuilding_replica(view, nu, step)
        case S.FINALIZING:
            return _finalizing(view, nu, now, step)
        case _:
            step.status.update(state=S.ERROR, message=f"Unknown state {state!r}")
            return step


def lists_leaving(view: UpgradeView, nu: lh.NodeDataEngineUpgrade) -> bool:
    """The node upgrade's plan still lists a volume that is gone or being deleted."""
    return any(leaving(view.volumes.get(name)) for name in nu.status.volumes)


def leaving(volume: lh.Volume | None) -> bool:
    """Gone, or being deleted: no longer the upgrade's to move (Longhorn detaches a volume it
    deletes, which the steps would otherwise report as "in neither detached nor attached state")."""
    return volume is None or bool(volume.metadata.deletion_timestamp)


def _without_leaving_volumes(
    view: UpgradeView, nu: lh.NodeDataEngineUpgrade, step: Step
) -> lh.NodeDataEngineUpgrade:
    """The node upgrade with the volumes that are gone or being deleted taken out of its plan
    (`status.volumes`), the pruned map recorded in `step`; `nu` itself when none is."""
    listed = nu.status.volumes
    if not any(leaving(view.volumes.get(name)) for name in listed):
        return nu
    volumes = {name: entry for name, entry in listed.items() if not leaving(view.volumes.get(name))}
    step.status["volumes"] = _volumes_status(volumes)
    step.status["progress"] = _progress(volumes)
    return msgspec.structs.replace(nu, status=msgspec.structs.replace(nu.status, volumes=volumes))


# --- aborts (the redesign's timeout, and a target image changed mid-flight) ------------------------


def _abort(
    view: UpgradeView, nu: lh.NodeDataEngineUpgrade, config: DeciderConfig, now: float, step: Step
) -> Step | None:
    """Start an abort when one is due; None when the machine carries on (also while aborting)."""
    state = nu.status.state
    created = parse_time(nu.metadata.creation_timestamp)
    if nu.status.abort_reason:
        # The restore gets one more timeout; a restore stuck as well ends the attempt (the next
        # attempt, or an operator, takes it from there) instead of holding every other node.
        if config.node_timeout > 0 and created is not None:
            deadline = created + 2 * config.node_timeout
            if now < deadline:
                step.wake = deadline
                return None
            step.status.update(
                state=S.ERROR,
                message=f"aborted ({nu.status.abort_reason}) in {nu.status.aborted_in or 'undefined'}; "
                f"restore did not finish in time: {nu.status.message}",
            )
            return step
        return None
    reason = ""
    if config.node_timeout > 0 and created is not None:
        deadline = created + config.node_timeout
        if now >= deadline:
            reason = AbortReason.TIMEOUT
        else:
            step.wake = deadline
    manager = view.managers.get(nu.spec.data_engine_upgrade_manager)
    target = manager.status.instance_manager_image if manager is not None else ""
    if not reason and target and target != nu.spec.instance_manager_image and state in _ABORT_TO:
        reason = AbortReason.TARGET_IMAGE_CHANGED
    if not reason and abort_requested(manager) and state in _ABORT_TO:
        reason = AbortReason.REQUESTED  # from rebuilding-replica on, finishing is the way back
    if not reason:
        return None
    return _start_abort(nu, reason, step)


def _start_abort(nu: lh.NodeDataEngineUpgrade, reason: str, step: Step) -> Step:
    state = nu.status.state
    next_state = _ABORT_TO.get(state, S.ERROR)
    message = f"aborted ({reason}) in {state or 'undefined'}"
    if state in (S.REBUILDING_REPLICA, S.FINALIZING):
        # The data plane is back on the node: nothing to restore, only the timeout ends it.
        message = f"timed out in {state}"
        next_state = S.ERROR
    if reason == AbortReason.TIMEOUT and nu.status.message:
        # What the attempt was stuck on is why it timed out: an attempt that ends here (from
        # `initializing`, `rebuilding-replica`, `finalizing`) keeps it in its final message, which
        # the manager's failure summary quotes ("node node-2 is not ready").
        message = f"{message}: {nu.status.message}"
    step.status.update(abortReason=str(reason), abortedIn=state, state=str(next_state), message=message)
    return step


def _has_running_v2_im(view: UpgradeView, node: str) -> bool:
    return any(im.status.current_state == "running" for im in view.v2_instance_managers_on(node))


def _rescue(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step | None:
    """A volume relocated to a temporary node that lost its v2 IM (V2U-19): move it on to another
    node (one holding a running replica of it first); when no node can take it, abort at once
    (`temporary-node-lost`) and restore, instead of waiting for the timeout. None: carry on."""
    node = nu.spec.node_id
    for name in sorted(nu.status.volumes):
        if nu.status.volumes[name].state in _SETTLED:
            continue
        volume = view.volumes.get(name)
        if volume is None:
            continue
        lost = volume.spec.target_node_id_for_live_upgrade
        if lost in ("", node, volume.spec.node_id) or _has_running_v2_im(view, lost):
            continue
        holders = {
            view.replicas[r].spec.node_id
            for r in view.replicas_by_volume.names(name)
            if view.replicas[r].status.current_state == "running"
        }
        candidates = sorted(
            (n not in holders, n)
            for n in view.nodes
            if n not in (node, lost) and view.node_ready(n) and _has_running_v2_im(view, n)
        )
        if not candidates:
            return _start_abort(nu, AbortReason.TEMPORARY_NODE_LOST, step)
        other = candidates[0][1]
        why = f"{nu.status.state}: temporary node {lost} lost its instance manager; volume {name} to {other}"
        step.actions.append(cmd.patch_volume(volume, None, other, why, now))
    return None


def _finish_aborted(nu: lh.NodeDataEngineUpgrade, step: Step) -> Step:
    step.status.update(
        state=S.ERROR,
        message=f"aborted ({nu.status.abort_reason}) in {nu.status.aborted_in or 'undefined'}; restored",
    )
    return step


# --- initializing --------------------------------------------------------------------------------------


LIVE_UPGRADE_UNSUPPORTED = ", which is not supported for live upgrade"
"""How every volume readiness blocker ends (Longhorn's own wording, §5.5 `initializing`)."""
NOT_HEALTHY = f" is not healthy{LIVE_UPGRADE_UNSUPPORTED}"


def is_volume_blocker(message: str) -> bool:
    """Whether a node upgrade's message is a volume readiness blocker (for its Warning Event)."""
    return message.startswith("volume ") and message.endswith(LIVE_UPGRADE_UNSUPPORTED)


def readiness_blockers(view: UpgradeView, node: str) -> list[str]:
    """Why the node's v2 volumes cannot be upgraded live yet: a single replica (the upgrade would
    take it away), or not healthy. Empty when nothing blocks."""
    blockers = []
    seen: set[str] = set()
    for replica in view.v2_replicas_on(node):
        volume = view.volumes.get(replica.spec.volume_name)
        if volume is None or leaving(volume) or detached(volume) or volume.metadata.name in seen:
            continue
        name = volume.metadata.name
        seen.add(name)
        if volume.spec.number_of_replicas <= 1:
            blockers.append(f"volume {name} has only 1 replica{LIVE_UPGRADE_UNSUPPORTED}")
        elif volume.status.robustness != "healthy":
            blockers.append(f"volume {name}{NOT_HEALTHY}")
    return blockers


def _initializing(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step:
    node, message = nu.spec.node_id, nu.status.message
    unnamed = not_yet_named(view, nu)
    if unnamed:
        return step.wait(unnamed, message)
    lh_node = view.nodes[node]  # (present, ready: node_guard.unfit passed)
    if lh.condition_status(lh_node.status.conditions, "DataEngineUpgradeRequested") == "False":
        return step.wait("node is not requested for data engine upgrade", message)
    blockers = readiness_blockers(view, node)
    unhealthy = next((b for b in blockers if b.endswith(NOT_HEALTHY)), "")
    if unhealthy:
        # Waiting would deadlock: this node upgrade flags the node, and the flag holds the very
        # rebuild (replenishment of volumes owned here, any rebuild of a volume with a replica
        # here) it would wait for. Let the node go; the manager starts it again once healthy.
        step.status.update(
            state=S.ERROR,
            abortReason=str(AbortReason.RELEASED),
            abortedIn=str(S.INITIALIZING),
            message=f"released: {unhealthy}; its rebuild waits while the node is flagged for upgrade",
        )
        return step
    if blockers:
        return step.wait(blockers[0], message)
    replica_volumes = {
        r.spec.volume_name for r in view.v2_replicas_on(node) if r.spec.volume_name in view.volumes
    }
    listed = {v.metadata.name: v for v in view.v2_volumes_owned_by(node) if not leaving(v)}
    volumes: VolumeMap = {name: lh.VolumeUpgradeStatus(state=S.INITIALIZING) for name in sorted(listed)}
    if nu.spec.snapshot_before_upgrade:
        taken = _snapshots(view, nu, listed.values(), now, step)
        if taken is None:
            return step.wait(step.blocker, message)
        for name, snapshot in taken.items():
            volumes[name] = msgspec.structs.replace(volumes[name], snapshot=snapshot)
    _transition(step, nu, S.FAILING_REPLICAS, volumes)
    step.status["replicaVolumes"] = sorted(replica_volumes)
    return step


def not_yet_named(view: UpgradeView, nu: lh.NodeDataEngineUpgrade) -> str:
    """Why the node upgrade waits, before it touches anything, for its manager to name its node in
    `upgradingNode` ("" when it need not): its manager created it, and the status write naming it
    was lost (say to a run of 429s). Going on, the attempt could end before the manager's record
    says it began. Only the attempt its manager will adopt waits (manager._adopt_own_attempt);
    any other goes on as before, or the two would wait on each other for ever."""
    manager = view.managers.get(nu.spec.data_engine_upgrade_manager)
    node = nu.spec.node_id
    if manager is None or is_terminal(manager.status.state) or manager.status.upgrading_node:
        return ""
    entry = manager.status.upgrade_nodes.get(node)
    if nu.metadata.name != cmd.node_upgrade_name(manager, node, entry.attempts if entry else 0):
        return ""
    return f"waiting for manager {manager.metadata.name} to name node {node} in flight"


def _snapshots(
    view: UpgradeView, nu: lh.NodeDataEngineUpgrade, volumes: Iterable[lh.Volume], now: float, step: Step
) -> dict[str, str] | None:
    """Volume → its snapshot for this node upgrade, once every running volume has a ready one;
    None while some is missing (created now: found first by its label, never taken twice) or not
    ready yet (`step.blocker` says which)."""
    mine: dict[str, lh.Snapshot] = {}
    for name in view.snapshots_by_upgrade.names(nu.metadata.name):
        snapshot = view.snapshots[name]
        mine.setdefault(snapshot.spec.volume, snapshot)
    taken: dict[str, str] = {}
    waiting = ""
    for volume in volumes:
        name = volume.metadata.name
        engine = view.current_engine(volume)
        if engine is None or engine.status.current_state != "running":
            continue
        found = mine.get(name)
        if found is None:
            step.actions.append(cmd.create_snapshot(nu, name, now))
            waiting = waiting or f"waiting for the snapshot of volume {name}"
        elif not found.status.ready_to_use:
            waiting = waiting or f"waiting for snapshot {found.metadata.name} of volume {name} to be ready"
        else:
            taken[name] = found.metadata.name
    if waiting:
        step.blocker = waiting
        return None
    return taken


# --- failing-replicas ---------------------------------------------------------------------------------


def _failing_replicas(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step:
    """Stop, then delete, the node's v2 replicas; v1 replicas on the node are never touched."""
    replicas = [r for r in view.v2_replicas_on(nu.spec.node_id) if not r.metadata.deletion_timestamp]
    pending = [r for r in view.v2_replicas_on(nu.spec.node_id)]
    if not pending:
        # The switch-over's first pass (each volume's image to restore, recorded before any volume
        # is touched) goes out with the transition, not a round trip after it; the volumes are
        # patched only once that record is written, as before.
        volumes = dict(nu.status.volumes)
        for name in sorted(n for n, v in volumes.items() if v.state not in _SETTLED):
            _record_switch_over(view, volumes, name)
        return _transition(step, nu, S.SWITCHING_OVER, volumes)
    to_stop = [r for r in replicas if r.spec.desire_state not in ("stopped", "error")]
    for replica in to_stop:
        step.actions.append(cmd.fail_replica(replica, now))
    if to_stop:
        return step.wait("not all replicas are stopped or failed", nu.status.message)
    if all(r.status.current_state == "stopped" or r.spec.desire_state == "error" for r in replicas):
        for replica in replicas:
            step.actions.append(cmd.delete_replica(replica, now))
        return step.wait("not all stopped or failed replicas are deleted", nu.status.message)
    return step.wait("not all replicas are stopped or failed", nu.status.message)


# --- switching-over --------------------------------------------------------------------------------------


def temporary_target(view: UpgradeView, nu: lh.NodeDataEngineUpgrade) -> str:
    """A node other than the upgrading one with a running v2 IM, preferring one already upgraded."""
    manager = view.managers.get(nu.spec.data_engine_upgrade_manager)
    done = manager.status.upgrade_nodes if manager is not None else {}
    candidates = []
    for node in sorted(view.nodes):
        if node == nu.spec.node_id or not view.node_ready(node):
            continue
        if any(im.status.current_state == "running" for im in view.v2_instance_managers_on(node)):
            upgraded = node in done and done[node].state == S.COMPLETED
            candidates.append((not upgraded, node))
    return min(candidates)[1] if candidates else ""


def _engine_held_at_home(view: UpgradeView, volume: lh.Volume, image: str) -> bool:
    """The volume's engine runs on its own node, in a running v2 IM of `image` that lists it."""
    engine = view.current_engine(volume)
    home = volume.spec.node_id
    if engine is None or engine.status.current_state != "running" or engine.spec.node_id != home:
        return False
    return any(
        im.spec.image == image
        and im.status.current_state == "running"
        and engine.metadata.name in im.status.instance_engines
        for im in view.v2_instance_managers_on(home)
    )


def _switching_over(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step:
    image, message = nu.spec.instance_manager_image, nu.status.message
    rescued = _rescue(view, nu, now, step)
    if rescued is not None:
        return rescued
    temp = temporary_target(view, nu)
    if not temp:
        return step.wait("failed to find available node for target", message)
    volumes = dict(nu.status.volumes)
    waiting = ""
    for name in sorted(volumes):
        entry = volumes[name]
        if entry.state in _SETTLED or entry.state == S.SWITCHED_OVER:
            continue
        volume = view.volumes.get(name)
        if (
            volume is not None
            and attached(volume)
            and volume.spec.image == image
            and not volume.spec.target_node_id_for_live_upgrade
        ):
            # Already on the new image at home (a previous attempt, aborted once the old IM was
            # gone, restored it there): no switch-over to do, and §5.3 refuses a target for it
            # ("volume V is already using instance manager image I"). Done once its engine runs in
            # the new IM; until then (the data plane catching up) only waited for.
            if volume.status.current_image == image and _engine_held_at_home(view, volume, image):
                _set(volumes, name, S.COMPLETED, f"already on instance manager image {image}")
            else:
                waiting = waiting or f"volume {name} is on image {image}, its engine not running there yet"
        elif entry.state != S.SWITCHING_OVER or volume is None or not attached(volume):
            _record_switch_over(view, volumes, name)
        else:
            spec, status = volume.spec, volume.status
            in_flight = spec.target_node_id_for_live_upgrade not in ("", spec.node_id)
            if not in_flight and (spec.image != image or spec.target_node_id_for_live_upgrade != temp):
                step.actions.append(
                    cmd.patch_volume(volume, image, temp, f"switching-over: volume {name} to {temp}", now)
                )
            elif (
                in_flight
                and spec.target_node_id_for_live_upgrade == status.current_target_node_id_for_live_upgrade
                and spec.image == status.current_image == image
            ):
                _set(volumes, name, S.SWITCHED_OVER)
    _write_volumes(step, nu, volumes)
    if all(v.state in _SETTLED or v.state == S.SWITCHED_OVER for v in volumes.values()):
        return _transition(step, nu, S.UPGRADING_INSTANCE_MANAGER, volumes)
    switching = next((n for n, v in sorted(volumes.items()) if v.state == S.SWITCHING_OVER), "")
    if switching and not waiting:  # a volume already on the image says what it waits for itself
        waiting = f"volume {switching} is not switched over to {temp}"
    return step.wait(waiting, message)


def _record_switch_over(view: UpgradeView, volumes: VolumeMap, name: str) -> None:
    """A volume's first pass of the switch-over: done when it is gone or detached, an error when it
    is neither attached nor detached, else `switching-over` with the image to restore recorded
    before the volume is touched (an abort needs it)."""
    entry, volume = volumes[name], view.volumes.get(name)
    if volume is None:
        _set(volumes, name, S.COMPLETED)
    elif detached(volume):
        _set(volumes, name, S.COMPLETED, "Volume is detached, so no need to switch over")
    elif not attached(volume):
        _set(volumes, name, S.ERROR, f"Volume {name} is in neither detached nor attached state")
    elif entry.state != S.SWITCHING_OVER:
        volumes[name] = lh.VolumeUpgradeStatus(
            state=S.SWITCHING_OVER, previous_image=volume.spec.image, snapshot=entry.snapshot
        )


# --- upgrading-instance-manager ------------------------------------------------------------------------


def _upgrading_instance_manager(
    view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step
) -> Step:
    node, image, message = nu.spec.node_id, nu.spec.instance_manager_image, nu.status.message
    rescued = _rescue(view, nu, now, step)
    if rescued is not None:
        return rescued
    new_im: lh.InstanceManager | None = None
    for im in view.v2_instance_managers_on(node):
        if im.spec.image != image:
            if not im.metadata.deletion_timestamp:  # already being deleted: never a second delete
                step.actions.append(cmd.delete_instance_manager(im, image, now, view.nodes.get(node)))
        elif im.status.current_state == "running":
            new_im = im
    if new_im is None:
        return step.wait(f"waiting for a running instance manager with image {image} on node {node}", message)
    volumes = dict(nu.status.volumes)
    for name in sorted(volumes):
        if volumes[name].state in _SETTLED:
            continue
        volume = view.volumes.get(name)
        if volume is None:
            _set(volumes, name, S.COMPLETED)
        elif detached(volume):
            _set(volumes, name, S.COMPLETED, "Volume is detached")
        else:
            engine = view.current_engine(volume)
            if engine is None or engine.metadata.name not in new_im.status.instance_engines:
                _write_volumes(step, nu, volumes)
                return step.wait(
                    f"waiting for the initiator of volume {name} on {new_im.metadata.name}", message
                )
    # the volumes' targets are sent home with the transition
    return _and_then(view, nu, step, S.SWITCHING_BACK, volumes, now, _switching_back)


# --- switching-back ---------------------------------------------------------------------------------------


def _switching_back(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step:
    running_images = _images_still_running(view, nu)
    volumes = dict(nu.status.volumes)
    waiting = ""
    for name in sorted(volumes):
        if volumes[name].state in _SETTLED:
            continue
        # every volume is stepped; the first one's wait is the one reported
        volume_waits = _switch_back_volume(view, nu, volumes, name, running_images, now, step)
        waiting = waiting or volume_waits
    _write_volumes(step, nu, volumes)
    if all(v.state in _SETTLED for v in volumes.values()):
        return _transition(step, nu, S.REBUILDING_REPLICA, volumes)
    return step.wait(waiting, nu.status.message)


def _images_still_running(view: UpgradeView, nu: lh.NodeDataEngineUpgrade) -> set[str]:
    """The images of the node's running instance managers, after an abort (else none).

    An abort restores each volume to the image it had, while the node still runs an IM on that
    image; once the old IM is gone the volume can only come back on the new one."""
    if not nu.status.abort_reason:
        return set()
    return {
        im.spec.image
        for im in view.v2_instance_managers_on(nu.spec.node_id)
        if im.status.current_state == "running" and not im.metadata.deletion_timestamp
    }


def _switch_back_volume(
    view: UpgradeView,
    nu: lh.NodeDataEngineUpgrade,
    volumes: VolumeMap,
    name: str,
    running_images: set[str],
    now: float,
    step: Step,
) -> str:
    """One unsettled volume of the node: back to the node (and its image), then its live-upgrade
    target cleared; its entry updated in `volumes`. What it waits for, "" when nothing."""
    node, entry = nu.spec.node_id, volumes[name]
    image = nu.spec.instance_manager_image
    if entry.previous_image in running_images:
        image = entry.previous_image
    volume = view.volumes.get(name)
    if volume is None:
        _set(volumes, name, S.COMPLETED)
        return ""
    if detached(volume):
        _set(volumes, name, S.COMPLETED, "Volume is detached")
        return ""
    if not attached(volume):
        _set(volumes, name, S.ERROR, f"Volume {name} is in neither detached nor attached state")
        return ""
    spec, status = volume.spec, volume.status
    target = spec.target_node_id_for_live_upgrade
    if entry.state == S.SWITCHED_BACK:
        if target:
            return _clear_the_target(step, volume, name, now)
        _set(volumes, name, S.COMPLETED)
        return ""
    if not target and spec.image == image:
        _set(volumes, name, S.COMPLETED)  # never switched over (or already cleared)
        return ""
    if target != node or spec.image != image:
        step.actions.append(
            cmd.patch_volume(
                volume,
                image if spec.image != image else None,
                node if target != node else None,
                f"switching-back: volume {name} to {node}",
                now,
            )
        )
        if entry.state != S.SWITCHING_BACK:
            _set(volumes, name, S.SWITCHING_BACK)
    elif (
        status.current_target_node_id_for_live_upgrade == node
        and spec.node_id == node
        and spec.image == status.current_image
    ):
        _set(volumes, name, S.SWITCHED_BACK)
        # The clear goes out with the record of the switch back, not a round trip after it (the
        # bench's switching-back step); a restart between the two finds the target cleared and
        # the volume on its image, which counts as done.
        return _clear_the_target(step, volume, name, now)
    elif entry.state != S.SWITCHING_BACK:
        _set(volumes, name, S.SWITCHING_BACK)
    return f"Volume {name} is not switched back to the target node {node}"


def _clear_the_target(step: Step, volume: lh.Volume, name: str, now: float) -> str:
    """The command that clears a switched-back volume's live-upgrade target, and the wait for it."""
    step.actions.append(cmd.patch_volume(volume, None, "", f"switching-back: volume {name} done", now))
    return f"waiting for volume {name} to clear its live-upgrade target"


# --- rebuilding-replica, finalizing -----------------------------------------------------------------------


def _rebuilding_replica(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, step: Step) -> Step:
    """Only this node's volumes (listed, or with a replica it deleted), not the whole cluster."""
    for name in sorted({*nu.status.volumes, *nu.status.replica_volumes}):
        volume = view.volumes.get(name)
        if volume is None or detached(volume) or volume.spec.data_engine != V2:
            continue
        if volume.status.robustness != "healthy":
            return step.wait(
                f"volume {name} is not healthy yet ({volume.status.robustness or 'unknown'})",
                nu.status.message,
            )
    if nu.status.abort_reason:
        return _finish_aborted(nu, step)
    return _transition(step, nu, S.FINALIZING)


def _finalizing(view: UpgradeView, nu: lh.NodeDataEngineUpgrade, now: float, step: Step) -> Step:
    """Every listed volume now detached from the node (whatever its state in the switch) starts
    on the new image at its next attach."""
    node, image = nu.spec.node_id, nu.spec.instance_manager_image
    updating = False
    for name in sorted(nu.status.volumes):
        volume = view.volumes.get(name)
        if volume is None:
            continue
        if volume.spec.node_id == "" and volume.status.owner_id == node and volume.spec.image != image:
            step.actions.append(
                cmd.patch_volume(volume, image, None, f"finalizing: detached volume {name}", now)
            )
            updating = True
    if not updating:
        return _transition(step, nu, S.COMPLETED)
    return step.wait("not all volumes spec.image is updated", nu.status.message)
