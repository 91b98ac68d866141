"""Per-round facts the volume-side controllers share: which nodes can take replicas, how loaded each
is, the rebuild slots left per node, and one volume's engine and replicas gathered together."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.engine_images import ready_nodes
from corral_sandbox.simulator.im_nodes import v2_disabled
from corral_sandbox.simulator.settings import as_int
from corral_sandbox.simulator.upgrade_signals import upgrading_nodes
from corral_sandbox.simulator.view import Obj, deleting, spec, status


@dataclass
class ClusterFacts:
    ready: list[str]
    schedulable: list[str]
    replicas_per_node: Counter[str]
    rebuild_limit: int
    rebuilding_per_node: Counter[str] = field(default_factory=Counter)
    engines_by_volume: dict[str, list[Obj]] = field(default_factory=dict)
    replicas_by_volume: dict[str, list[Obj]] = field(default_factory=dict)
    # nodes whose DataEngineUpgradeRequested condition is True, and nodes with v2 disabled (SIM-V2)
    upgrading: set[str] = field(default_factory=set)
    v2_disabled: set[str] = field(default_factory=set)

    @classmethod
    def gather(cls, ctx: ReconcileContext) -> ClusterFacts:
        ready = ready_nodes(ctx.view)
        schedulable = [
            n for n in ready if spec(ctx.view.objects["node"][n]).get("allowScheduling", True) is not False
        ]
        per_node: Counter[str] = Counter()
        engines: dict[str, list[Obj]] = defaultdict(list)
        replicas: dict[str, list[Obj]] = defaultdict(list)
        for engine in ctx.view.all("engine"):
            engines[spec(engine).get("volumeName", "")].append(engine)
        for replica in ctx.view.all("replica"):
            replicas[spec(replica).get("volumeName", "")].append(replica)
            if spec(replica).get("nodeID"):
                per_node[spec(replica)["nodeID"]] += 1
        limit = as_int(ctx.view.setting("concurrent-replica-rebuild-per-node-limit", "5"), 5)
        facts = cls(
            ready,
            schedulable,
            per_node,
            limit,
            Counter(),
            dict(engines),
            dict(replicas),
            upgrading_nodes(ctx.view),
            {n for n in ready if v2_disabled(ctx.view, n)},
        )
        # replicas whose rebuild already holds a slot (a live timer) count against their node
        for key in ctx.memory.timers:
            if key.startswith("rebuild/"):
                held = ctx.view.get("replica", key.removeprefix("rebuild/"))
                if held is not None and not spec(held).get("healthyAt"):
                    facts.rebuilding_per_node[str(spec(held).get("nodeID", ""))] += 1
        return facts


@dataclass
class VolumeScope:
    volume: Obj
    engine: Obj | None
    replicas: list[Obj]

    @property
    def name(self) -> str:
        return str(self.volume["metadata"]["name"])

    @property
    def data_engine(self) -> str:
        return str(spec(self.volume).get("dataEngine") or "v1")

    def live(self) -> list[Obj]:
        return [r for r in self.replicas if not deleting(r)]

    def active(self) -> list[Obj]:
        return [r for r in self.live() if spec(r).get("active", True) is not False]

    def inactive(self) -> list[Obj]:
        return [r for r in self.live() if spec(r).get("active", True) is False]


def failed(replica: Obj) -> bool:
    return bool(spec(replica).get("failedAt"))


def running(obj: Obj) -> bool:
    return status(obj).get("currentState") == "running"


def alive(engine: Obj) -> bool:
    """Running, or a v2 engine suspended for a target switch-over: its volume stays attached."""
    return status(engine).get("currentState") in ("running", "suspended")


def address(replica: Obj) -> str:
    return f"tcp://{status(replica).get('ip', '')}:{status(replica).get('port', 0)}"
