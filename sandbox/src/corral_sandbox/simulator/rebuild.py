"""SIM-REB: replica failure and rebuild, and the engine's view of its replicas (`replicaModeMap`,
`rebuildStatus`).

A replica that has never been in sync (`spec.healthyAt` empty) must be rebuilt before it counts:
it is write-only (`WO`) while rebuilding, which takes `rebuild_seconds` once a slot is free under
`concurrent-replica-rebuild-per-node-limit` on its node (0 blocks rebuilds, as in Longhorn). A
fresh volume whose replicas have no data yet is in sync at once. A replica whose process errors
while attached is marked failed (`spec.failedAt`), stopped, and deleted after `stale_replica_seconds`.
"""

from __future__ import annotations

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.scope import ClusterFacts, VolumeScope, address, failed, running
from corral_sandbox.simulator.view import spec, status


def mark_failed_replicas(ctx: ReconcileContext, scope: VolumeScope, state: str) -> None:
    for replica in scope.live():
        rspec = spec(replica)
        # unknown (its node down): out of the engine's reach, which marks it failed as an error
        lost = status(replica).get("currentState") in ("error", "unknown")
        if lost and not failed(replica) and state != "detached":
            ctx.patch_spec(
                "replica",
                replica,
                {"failedAt": ctx.stamp, "lastFailedAt": ctx.stamp, "desireState": "stopped"},
                "replica failed",
            )
        elif (
            failed(replica)
            and rspec.get("active", True) is not False
            and ctx.waited(f"stale/{replica['metadata']['name']}", ctx.config.stale_replica_seconds)
        ):
            ctx.delete("replica", replica, "failed replica past staleReplicaTimeout")


def engine_modes(ctx: ReconcileContext, facts: ClusterFacts, scope: VolumeScope) -> dict[str, str]:
    """Modes of the active replicas as the running engine sees them; starts/finishes rebuilds."""
    engine = scope.engine
    assert engine is not None
    active = [r for r in scope.active() if spec(r).get("nodeID")]
    in_sync = [r for r in active if running(r) and spec(r).get("healthyAt") and not failed(r)]
    modes: dict[str, str] = {}
    rebuild_status: dict[str, dict[str, object]] = {}
    fresh = not in_sync and not any(spec(r).get("healthyAt") for r in active)
    # §5.4: a v2 engine starts no rebuild while any replica of its volume sits on an upgrading node
    held_back = scope.data_engine == "v2" and any(
        spec(r).get("nodeID") in facts.upgrading for r in scope.live()
    )
    for replica in active:
        name = replica["metadata"]["name"]
        if failed(replica) or status(replica).get("currentState") in ("error", "unknown"):
            modes[name] = "ERR"
            continue
        if not running(replica):
            continue
        if spec(replica).get("healthyAt"):
            modes[name] = "RW"
            continue
        if fresh:
            ctx.patch_spec("replica", replica, {"healthyAt": ctx.stamp}, "fresh replica in sync")
            modes[name] = "RW"
            continue
        node = spec(replica).get("nodeID", "")
        key = f"rebuild/{name}"
        holding = key in ctx.memory.timers
        if not holding:
            if held_back:
                continue
            if facts.rebuild_limit <= 0 or facts.rebuilding_per_node[node] >= facts.rebuild_limit:
                continue  # queued: not yet added to the engine
            facts.rebuilding_per_node[node] += 1
        if ctx.waited(key, ctx.config.rebuild_seconds):
            ctx.patch_spec("replica", replica, {"healthyAt": ctx.stamp}, "rebuild complete")
            modes[name] = "RW"
            rebuild_status[address(replica)] = {
                "isRebuilding": False,
                "progress": 100,
                "state": "complete",
                "fromReplicaAddress": address(in_sync[0]) if in_sync else "",
            }
        else:
            modes[name] = "WO"
            rebuild_status[address(replica)] = {
                "isRebuilding": True,
                "progress": 50,
                "state": "in_progress",
                "fromReplicaAddress": address(in_sync[0]) if in_sync else "",
            }
    addresses = {
        r["metadata"]["name"]: f"{status(r).get('ip', '')}:{status(r).get('port', 0)}"
        for r in active
        if r["metadata"]["name"] in modes and modes[r["metadata"]["name"]] != "ERR"
    }
    if not spec(engine).get("upgradedReplicaAddressMap"):
        ctx.patch_spec("engine", engine, {"replicaAddressMap": addresses}, "engine replica set")
    ctx.patch_status(
        "engine", engine, {"replicaModeMap": modes, "rebuildStatus": rebuild_status}, "engine replica modes"
    )
    return modes
