"""Group D of §3.3, judged per instance manager: the data-engine toggles and the guaranteed IM CPU.

Both are gated by *engine instances*, not by volume state: a data engine may be disabled (its
instance managers deleted) and its IM pods restarted for a new CPU request only while no instance
manager of that engine holds an engine or engine-frontend instance. So this index keeps, per data
engine, the busy instance managers (the precondition is "that set is empty", O(1)), the IM CRs a
disabled engine must lose, and the IM pods whose CPU request is not the one §4.4's formula gives.

Everything is incremental: an IM or IM-pod event re-judges that one instance manager, a Longhorn or
Kubernetes node event the instance managers on that node, a setting change every one (rare).
"""

from __future__ import annotations

from collections import defaultdict

from corral_dangerzone.cpu_request import instance_manager_cpu_request, same_cpu_request
from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import SettingName
from corral_model.longhorn import InstanceManager, KubeNode, Node, Pod, condition_status

N = SettingName
ENGINES = ("v1", "v2")
TOGGLE = {"v1": N.V1_DATA_ENGINE, "v2": N.V2_DATA_ENGINE}
ALL_IN_ONE = "aio"


def busy(im: InstanceManager) -> bool:
    """ValidateVxDataEngineEnabled's test: the IM has engine or engine-frontend instances."""
    return bool(im.status.instance_engines) or bool(im.status.instance_engine_frontends)


class EngineIndex:
    """Per data engine: busy IMs, IM CRs of a disabled engine, IM pods lagging the CPU request."""

    def __init__(self, settings: DangerZoneSettings) -> None:
        self.settings = settings
        self.ims: dict[str, InstanceManager] = {}
        self.pods: dict[str, Pod] = {}
        """Instance-manager pods by name (an IM's pod carries its IM's name)."""
        self.nodes: dict[str, Node] = {}
        self.kube_nodes: dict[str, KubeNode] = {}
        self.on_node: defaultdict[str, set[str]] = defaultdict(set)
        self.busy: dict[str, set[str]] = {e: set() for e in ENGINES}
        self.disabled: dict[str, set[str]] = {e: set() for e in ENGINES}
        """IM CRs (not already being deleted) of a data engine the toggle turned off."""
        self.cpu_lagging: dict[str, set[str]] = {e: set() for e in ENGINES}
        """IM pods whose CPU request is not the formula's (on a Ready Longhorn node)."""
        self.moves = 0
        """Bumped whenever an IM becomes busy or idle (the blockers named changed)."""

    # --- input: each returns the settings whose verdict may have changed ----------------------------

    def apply_im(self, name: str, im: InstanceManager | None) -> set[SettingName]:
        """Most IM events are its instance maps moving: those re-judge only whether it is busy."""
        old = self.ims.get(name)
        if old is not None:
            self.on_node[old.spec.node_id].discard(name)
        if im is None:
            self.ims.pop(name, None)
        else:
            self.ims[name] = im
            self.on_node[im.spec.node_id].add(name)
        same_spec = old is not None and im is not None and old.spec == im.spec
        return self._judge(name, cpu=not same_spec)

    def apply_pod(self, name: str, pod: Pod | None) -> set[SettingName]:
        """Most pod events are status updates: only a new CPU request (or a new pod) re-judges it."""
        old = self.pods.get(name)
        if pod is None:
            self.pods.pop(name, None)
        else:
            self.pods[name] = pod
        if old is not None and pod is not None and _cpu_request(old) == _cpu_request(pod):
            return set()
        return self._judge(name)

    def apply_node(self, name: str, node: Node | None) -> set[SettingName]:
        if node is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = node
        return self._judge_node(name)

    def apply_kube_node(self, name: str, node: KubeNode | None) -> set[SettingName]:
        if node is None:
            self.kube_nodes.pop(name, None)
        else:
            self.kube_nodes[name] = node
        return self._judge_node(name)

    def revalue(self, settings: DangerZoneSettings) -> set[SettingName]:
        """New setting values: every instance manager again (a setting change is rare)."""
        self.settings = settings
        changed: set[SettingName] = set()
        for name in list(self.ims.keys() | self.pods.keys()):
            changed |= self._judge(name)
        return changed

    def _judge_node(self, node: str) -> set[SettingName]:
        changed: set[SettingName] = set()
        for name in list(self.on_node.get(node, ())):
            changed |= self._judge(name)
        return changed

    def _judge(self, name: str, cpu: bool = True) -> set[SettingName]:
        im = self.ims.get(name)
        engine = im.spec.data_engine if im is not None else ""
        changed: set[SettingName] = set()
        for e in ENGINES:
            mine = im is not None and e == engine
            was_idle = not self.busy[e]
            if _move(self.busy[e], name, mine and busy(im)):  # type: ignore[arg-type]
                self.moves += 1
            if was_idle != (not self.busy[e]):  # the engine's precondition flipped
                changed |= {TOGGLE[e], N.GUARANTEED_INSTANCE_MANAGER_CPU}
            gone = mine and not self.settings.data_engine_enabled(e)
            if _move(self.disabled[e], name, gone and not im.metadata.deletion_timestamp):  # type: ignore[union-attr]
                changed.add(TOGGLE[e])
            if cpu and _move(self.cpu_lagging[e], name, mine and self._cpu_lags(name)):
                changed.add(N.GUARANTEED_INSTANCE_MANAGER_CPU)
        return changed

    def _cpu_lags(self, name: str) -> bool:
        """§3.3 group D: an all-in-one IM's pod, its IM CR present and its Longhorn node Ready, whose
        container CPU request is not the expected one. A pod on its way out lags until it is gone."""
        im, pod = self.ims.get(name), self.pods.get(name)
        if im is None or pod is None or im.spec.type not in (ALL_IN_ONE, ""):
            return False
        node = self.nodes.get(im.spec.node_id)
        if node is None or condition_status(node.status.conditions, "Ready") != "True":
            return False
        try:
            expected = instance_manager_cpu_request(
                im.spec.data_engine, self.settings, node, self.kube_nodes.get(im.spec.node_id)
            )
        except SettingValueError:
            return False  # neither v1 nor v2: Longhorn's sync errors on it; corral leaves it
        return not same_cpu_request(expected, _cpu_request(pod))

    # --- output -----------------------------------------------------------------------------------

    def engine_busy(self, engine: str) -> bool:
        return bool(self.busy[engine])


def _cpu_request(pod: Pod) -> str | None:
    """The CPU request of the pod's first container (the instance manager's), if any."""
    container = pod.spec.containers[0] if pod.spec.containers else None
    return container.resources.requests.get("cpu") if container is not None else None


def _move(names: set[str], name: str, member: bool) -> bool:
    """Put `name` in or out of `names`; True when that changed the set."""
    if member:
        if name in names:
            return False
        names.add(name)
        return True
    if name in names:
        names.discard(name)
        return True
    return False
