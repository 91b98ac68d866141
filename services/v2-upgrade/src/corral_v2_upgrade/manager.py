"""The DataEngineUpgradeManager state machine (longhorn-behaviour.md §5.5, first table), one pass.

Pure, like node.py, and with all its memory in the CR: which node is in flight
(`status.upgradingNode`), each node's state, failed attempts and finished attempts. The next node
upgrade's name derives from the manager, the node and the attempt number, so a restarted decider
creates the same object, and a node is only ever started when no node upgrade is in flight
anywhere: at most one node at a time. Unlike the prototype, a node that fails is retried a bounded
number of times and then marked `error`, and the manager moves on and ends with a summary.
"""

from __future__ import annotations

import msgspec

from corral_model import longhorn as lh
from corral_v2_upgrade import commands as cmd
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.states import AbortReason, UpgradeState, is_terminal
from corral_v2_upgrade.step import Step, parse_time
from corral_v2_upgrade.view import ABORT_ANNOTATION, DEFAULT_IM_IMAGE, V2, UpgradeView, abort_requested

S = UpgradeState
NodeMap = dict[str, lh.UpgradeNodeStatus]


def _nodes_status(nodes: NodeMap) -> dict[str, dict[str, object]]:
    return {name: msgspec.to_builtins(n) for name, n in sorted(nodes.items())}


def _progress(nodes: NodeMap) -> str:
    return f"{sum(1 for n in nodes.values() if is_terminal(n.state))}/{len(nodes)}"


def _write_nodes(step: Step, manager: lh.DataEngineUpgradeManager, nodes: NodeMap) -> None:
    if nodes != manager.status.upgrade_nodes:
        step.status["upgradeNodes"] = _nodes_status(nodes)
        step.status["progress"] = _progress(nodes)


def in_flight(view: UpgradeView) -> list[lh.NodeDataEngineUpgrade]:
    """Node upgrades not finished, of any manager (the one-node-at-a-time rule is cluster-wide)."""
    return [u for u in view.node_upgrades.values() if not is_terminal(u.status.state)]


def step_manager(
    view: UpgradeView,
    manager: lh.DataEngineUpgradeManager,
    config: DeciderConfig,
    now: float,
    starting: bool = False,
) -> Step:
    """`starting`: a node upgrade create is out and not yet visible (no second one meanwhile)."""
    if abort_requested(manager) and manager.status.state in (S.UNDEFINED, S.INITIALIZING):
        return Step(status={"state": S.ERROR, "message": f"{_aborted(manager)} before any node started"})
    match manager.status.state:
        case S.UNDEFINED:
            return _undefined(view, manager)
        case S.INITIALIZING:
            return _initializing(view, manager)
        case S.UPGRADING:
            return _upgrading(view, manager, config, now, starting)
        case S.COMPLETED | S.ERROR:
            return Step()
        case other:
            return Step(
                status={"state": S.ERROR, "message": f"Unknown dataEngineUpgradeManager state {other!r}"}
            )


def candidate_nodes(view: UpgradeView, manager: lh.DataEngineUpgradeManager) -> list[str]:
    return sorted(manager.spec.nodes) if manager.spec.nodes else sorted(view.nodes)


def _undefined(view: UpgradeView, manager: lh.DataEngineUpgradeManager) -> Step:
    if manager.spec.data_engine != V2:
        return Step(
            status={"state": S.ERROR, "message": f"unsupported data engine {manager.spec.data_engine}"}
        )
    image = view.setting(DEFAULT_IM_IMAGE)
    if not image:
        return Step(status={"state": S.ERROR, "message": f"failed to get setting {DEFAULT_IM_IMAGE}"})
    # Every node to upgrade must have pulled the image (the LEP's rule; the prototype checked only
    # nodes listed in spec.nodes).
    missing = []
    for node in candidate_nodes(view, manager):
        if view.v2_disabled(node):
            continue
        kube = view.kube_nodes.get(node)
        names = [n for entry in (kube.status.images if kube else ()) for n in entry.get("names", ()) or ()]
        if not any(image in n for n in names):
            missing.append(f"failed to find default instance manager image {image} in node {node}")
    if missing:
        return Step(status={"state": S.ERROR, "instanceManagerImage": image, "message": "; ".join(missing)})
    return Step(status={"state": S.INITIALIZING, "instanceManagerImage": image, "message": ""})


def _initializing(view: UpgradeView, manager: lh.DataEngineUpgradeManager) -> Step:
    nodes = node_set(view, manager, manager.status.instance_manager_image)
    step = Step(status={"state": S.UPGRADING if nodes else S.COMPLETED, "message": ""})
    step.status["upgradeNodes"] = _nodes_status(nodes)
    step.status["progress"] = _progress(nodes)
    return step


def node_set(view: UpgradeView, manager: lh.DataEngineUpgradeManager, image: str) -> NodeMap:
    """Every node the manager covers: `pending`, or `completed` with the reason it needs nothing."""
    nodes: NodeMap = {}
    for node in candidate_nodes(view, manager):
        if view.v2_disabled(node):
            nodes[node] = lh.UpgradeNodeStatus(
                state=S.COMPLETED, message=f"V2 data engine is disabled for node {node}"
            )
        elif manager.spec.nodes or any(
            im.spec.image != image and im.status.current_state == "running"
            for im in view.v2_instance_managers_on(node)
        ):
            nodes[node] = lh.UpgradeNodeStatus(state=S.PENDING)
        else:
            nodes[node] = lh.UpgradeNodeStatus(
                state=S.COMPLETED, message=f"Old instance manager is not running for node {node}"
            )
    return nodes


def _current_attempt(
    view: UpgradeView, manager: lh.DataEngineUpgradeManager, node: str, entry: lh.UpgradeNodeStatus
) -> lh.NodeDataEngineUpgrade | None:
    return view.node_upgrades.get(cmd.node_upgrade_name(manager, node, entry.attempts))


def _upgrading(
    view: UpgradeView, manager: lh.DataEngineUpgradeManager, config: DeciderConfig, now: float, starting: bool
) -> Step:
    step = Step()
    status = manager.status
    image = view.setting(DEFAULT_IM_IMAGE)
    if image and image != status.instance_manager_image:
        # The node in flight aborts (target-image-changed) and is reset; pending nodes get the new one.
        step.status.update(
            instanceManagerImage=image,
            message=f"target image changed from {status.instance_manager_image} to {image}",
        )
        return step
    nodes = dict(status.upgrade_nodes)
    if status.upgrading_node:
        return _follow_the_node_in_flight(step, view, manager, config, nodes, status.upgrading_node)
    return _next_node(step, view, manager, config, nodes, now, starting)


def _follow_the_node_in_flight(
    step: Step,
    view: UpgradeView,
    manager: lh.DataEngineUpgradeManager,
    config: DeciderConfig,
    nodes: NodeMap,
    upgrading: str,
) -> Step:
    """The node recorded in flight: its attempt's outcome (or its loss) into the node's entry."""
    entry = nodes.get(upgrading, lh.UpgradeNodeStatus())
    current = _current_attempt(view, manager, upgrading, entry)
    if current is None:
        nodes[upgrading] = _orphaned(entry, config)
        _write_nodes(step, manager, nodes)
        step.status["upgradingNode"] = ""
        return step
    state, message = current.status.state, current.status.message
    if state == S.COMPLETED:
        nodes[upgrading] = msgspec.structs.replace(
            entry, state=S.COMPLETED, message=message, attempts=entry.attempts + 1
        )
        step.status["upgradingNode"] = ""
    elif state == S.ERROR:
        nodes[upgrading] = _after_failed_attempt(entry, current.status.abort_reason, message, config)
        step.status["upgradingNode"] = ""
    elif (state, message) != (entry.state, entry.message):
        nodes[upgrading] = msgspec.structs.replace(entry, state=state, message=message)
    _write_nodes(step, manager, nodes)
    return step


def _orphaned(entry: lh.UpgradeNodeStatus, config: DeciderConfig) -> lh.UpgradeNodeStatus:
    """The entry of a node whose node upgrade is gone: back to pending, the retry count kept.

    The lost attempt counts as finished, so the next one gets a name (and a create command id) of
    its own: the same name again would make the same command id, which JetStream drops as a
    duplicate of the lost attempt's create for its whole dedup window, and would find the lost
    attempt's snapshots by their label. With it gone its node is released (no upgrade flags it),
    and the next attempt waits for the node's volumes to rebuild (`_start_blocker`). Restarts that
    use no retry are bounded as well."""
    attempts = entry.attempts + 1
    if attempts - entry.retries > config.max_retries:
        return msgspec.structs.replace(
            entry,
            state=S.ERROR,
            message=f"node upgrade resource not found; {attempts} attempts did not finish",
            attempts=attempts,
        )
    return msgspec.structs.replace(
        entry,
        state=S.PENDING,
        message="node upgrade resource not found; will start again",
        attempts=attempts,
    )


def _after_failed_attempt(
    entry: lh.UpgradeNodeStatus, abort_reason: str, message: str, config: DeciderConfig
) -> lh.UpgradeNodeStatus:
    """The entry of a node whose attempt ended in error: pending again (a let-go or a restart uses
    no retry; a failure does) or, past the bound, in error."""
    attempts = entry.attempts + 1
    if abort_reason == AbortReason.RELEASED:
        # Let go before anything was touched: back to pending, no retry used, bounded as
        # every such restart is (`_start_blocker` holds it until its volumes are healthy).
        bounded = attempts - entry.retries > config.max_retries
        return msgspec.structs.replace(
            entry,
            state=S.ERROR if bounded else S.PENDING,
            message=f"{message}; {attempts} attempts did not finish"
            if bounded
            else f"will start again once its volumes are healthy: {message}",
            attempts=attempts,
        )
    if abort_reason in (AbortReason.TARGET_IMAGE_CHANGED, AbortReason.REQUESTED):
        return msgspec.structs.replace(
            entry,
            state=S.PENDING,
            message=f"restarting with the new image: {message}",
            attempts=attempts,
        )
    if entry.retries + 1 >= config.max_retries:
        return lh.UpgradeNodeStatus(
            state=S.ERROR,
            message=f"failed {entry.retries + 1} times, last: {message}",
            retries=entry.retries + 1,
            attempts=attempts,
        )
    return lh.UpgradeNodeStatus(
        state=S.PENDING,
        message=f"attempt failed, will retry: {message}",
        retries=entry.retries + 1,
        attempts=attempts,
    )


def _next_node(
    step: Step,
    view: UpgradeView,
    manager: lh.DataEngineUpgradeManager,
    config: DeciderConfig,
    nodes: NodeMap,
    now: float,
    starting: bool,
) -> Step:
    """No node recorded in flight: adopt this manager's own unfinished attempt, stop on an abort,
    wait for another node upgrade or the start time, else start the next pending node."""
    status = manager.status
    busy = in_flight(view)
    adopted = _adopt_own_attempt(step, manager, nodes, busy, now)
    if adopted is not None:
        return adopted
    if abort_requested(manager):
        if starting:
            return step.wait("aborting: waiting for the node upgrade being created", status.message)
        # Nothing of its own in flight any more (the node in flight restored itself): stop here.
        _write_nodes(step, manager, nodes)
        step.status.update(state=S.ERROR, message=f"{_aborted(manager)}: {_summary(nodes)}")
        return step
    if busy or starting:
        return step.wait("waiting for another node upgrade to finish", status.message)
    if not status.started_at:
        start = parse_time(manager.spec.start_time)
        if start is not None and start > now:
            step.wake = start
            return step.wait(f"scheduled to start at {manager.spec.start_time}", status.message)
    return _start_the_next_pending_node(step, view, manager, config, nodes, now)


def _adopt_own_attempt(
    step: Step,
    manager: lh.DataEngineUpgradeManager,
    nodes: NodeMap,
    busy: list[lh.NodeDataEngineUpgrade],
    now: float,
) -> Step | None:
    """This manager's own unfinished node upgrade, recorded in flight (the create was applied, the
    manager's status not yet written when the last decider stopped); None when there is none.
    Only the attempt its status names (any other unfinished one just waits: it ends by itself, at
    the latest by its timeout)."""
    for node_upgrade in busy:
        node = node_upgrade.spec.node_id
        entry = nodes.get(node, lh.UpgradeNodeStatus())
        if node_upgrade.metadata.name == cmd.node_upgrade_name(manager, node, entry.attempts):
            return _record_in_flight(step, manager, nodes, node_upgrade, now)
    return None


def _record_in_flight(
    step: Step,
    manager: lh.DataEngineUpgradeManager,
    nodes: NodeMap,
    attempt: lh.NodeDataEngineUpgrade,
    now: float,
) -> Step:
    """Name `attempt`'s node in flight; the next pass follows the attempt to its outcome."""
    node, state = attempt.spec.node_id, attempt.status.state
    in_flight = state if state and not is_terminal(state) else S.INITIALIZING
    nodes[node] = msgspec.structs.replace(nodes.get(node, lh.UpgradeNodeStatus()), state=in_flight)
    _write_nodes(step, manager, nodes)
    step.status["upgradingNode"] = node
    if not manager.status.started_at:
        step.status["startedAt"] = cmd.rfc3339(now)
    return step


def _start_the_next_pending_node(
    step: Step,
    view: UpgradeView,
    manager: lh.DataEngineUpgradeManager,
    config: DeciderConfig,
    nodes: NodeMap,
    now: float,
) -> Step:
    """Create the node upgrade of the first pending node nothing holds; else say what holds them,
    or, with nothing left to start, complete with a summary that names every node that failed."""
    held: dict[str, str] = {}
    for node in sorted(nodes):
        entry = nodes[node]
        if entry.state != S.PENDING:
            continue
        if node not in view.nodes:
            nodes[node] = msgspec.structs.replace(entry, state=S.ERROR, message=f"node {node} not found")
            continue
        existing = _current_attempt(view, manager, node, entry)
        if existing is not None:
            # Its attempt exists already, finished perhaps (the status write naming it in flight
            # was lost): follow it, as Longhorn tolerates AlreadyExists, never create it again.
            return _record_in_flight(step, manager, nodes, existing, now)
        blocker = _start_blocker(view, node)
        if blocker:
            # Not started: an upgrade would flag the node, and the flag holds this rebuild.
            held[node] = blocker
            continue
        step.actions.append(
            cmd.create_node_upgrade(manager, node, entry.attempts, config.snapshot_before_upgrade, now)
        )
        # (The held nodes' messages wait: a status write beside a create must name the node it
        # starts, which only the next pass, adopting it, does.)
        _write_nodes(step, manager, nodes)
        return step
    if held:
        for node, blocker in held.items():
            nodes[node] = msgspec.structs.replace(nodes[node], message=blocker)
        _write_nodes(step, manager, nodes)
        first = min(held)
        return step.wait(f"waiting before the next node: node {first}: {held[first]}", manager.status.message)
    # Nothing left to start: done, with a summary that names every node that failed.
    _write_nodes(step, manager, nodes)
    step.status.update(state=S.COMPLETED, message=_summary(nodes))
    return step


def _start_blocker(view: UpgradeView, node: str) -> str:
    """Why a node upgrade must not start on `node` yet: a v2 volume it owns, or with a replica on
    it, is attached and not healthy. While any node upgrade for the node exists in `initializing`
    or before, Longhorn's node controller flags the node (`DataEngineUpgradeRequested`); then its
    volume controller does not replenish v2 volumes owned there, nor does a v2 engine rebuild while
    any replica of its volume sits there, and `initializing` waits for exactly those volumes to be
    healthy. Starting would deadlock the rebuild (a retry after an attempt deleted mid-flight, or a
    volume degraded already); waiting unflagged lets it finish. "" when nothing blocks."""
    names = {v.metadata.name for v in view.v2_volumes_owned_by(node)}
    names.update(r.spec.volume_name for r in view.v2_replicas_on(node))
    for name in sorted(names):
        volume = view.volumes.get(name)
        if volume is None or volume.metadata.deletion_timestamp or volume.spec.data_engine != V2:
            continue
        if volume.status.state != "detached" and volume.status.robustness != "healthy":
            robustness = volume.status.robustness or "unknown"
            return f"waiting for volume {name} ({robustness}) to be healthy before starting"
    return ""


def _summary(nodes: NodeMap) -> str:
    """`2 of 3 nodes upgraded; failed: node-1 (…)`, and the nodes never started, if any."""
    failed = sorted(n for n, e in nodes.items() if e.state == S.ERROR)
    upgraded = sum(1 for e in nodes.values() if e.state == S.COMPLETED)
    summary = f"{upgraded} of {len(nodes)} nodes upgraded"
    if failed:
        summary += "; failed: " + ", ".join(f"{n} ({nodes[n].message})" for n in failed)
    left = sorted(n for n, e in nodes.items() if not is_terminal(e.state))
    if left:
        summary += "; not upgraded: " + ", ".join(left)
    return summary


def _aborted(manager: lh.DataEngineUpgradeManager) -> str:
    note = manager.metadata.annotations.get(ABORT_ANNOTATION, "")
    return "aborted by the operator" + (f" ({note})" if note else "")
