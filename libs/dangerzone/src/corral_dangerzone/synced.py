"""Is a running instance-manager pod in line with the danger-zone settings? (§4.3 steps 3-5, §4.5)

The im-restart decider deletes an idle IM pod exactly when Longhorn would, so each setting's
"synced" predicate is Longhorn's, including the lenient ones (no liveness probe = synced, v1 ignores
the v2-only settings). The hugepage and CPU-mask checks are separate, as in Longhorn, because they
have their own outcomes (a hugepage mismatch on a node without capacity blocks every deletion).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from corral_dangerzone.cpu_request import instance_manager_cpu_request, same_cpu_request
from corral_dangerzone.network import CNI_NETWORKS_ANNOTATION, STORAGE_NETWORK_INTERFACE, cni_annotation
from corral_dangerzone.node_selector import same_node_selector
from corral_dangerzone.pod_spec import (
    CPU_ISOLATION_FLAGS,
    go_clean,
    instance_manager_log_path,
    resolve_cpu_isolation,
)
from corral_dangerzone.quantity import parse_quantity, same_quantity
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import (
    DANGER_ZONE,
    DEFAULT_CONTROL_PATH,
    SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE,
    SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE,
    SettingName,
)
from corral_dangerzone.tolerations import (
    LAST_APPLIED_TOLERATIONS_ANNOTATION,
    decode_last_applied,
    same_toleration_set,
)
from corral_model.longhorn import (
    Container,
    InstanceManager,
    KubeNode,
    Node,
    Pod,
    condition_status,
)

N = SettingName
ACTIVE_INSTANCE_STATES = frozenset({"running", "starting"})
HUGEPAGE_BLOCKED_SUFFIX = (
    "; skipping pod deletion because sufficient hugepage capacity for rescheduling cannot be confirmed"
)


class PodContext(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the predicates read besides the settings."""

    im: InstanceManager
    pod: Pod
    node: Node | None
    """The Longhorn node named by the pod's `spec.nodeName` (guaranteed-CPU check)."""
    kube_node: KubeNode | None
    control_path: str = DEFAULT_CONTROL_PATH


def _container(pod: Pod) -> Container | None:
    return pod.spec.containers[0] if pod.spec.containers else None


def _arg_value(args: tuple[str, ...], flag: str) -> str:
    """`getContainerArgValue`: the element after `flag`, "" when absent or last."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return ""


def _is_v1(ctx: PodContext) -> bool:
    return ctx.im.spec.data_engine == "v1"


def taint_toleration_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    annotation = ctx.pod.metadata.annotations.get(LAST_APPLIED_TOLERATIONS_ANNOTATION)
    return same_toleration_set(decode_last_applied(annotation), s.tolerations)


def node_selector_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    return same_node_selector(ctx.pod.spec.node_selector, s.node_selector)


def guaranteed_cpu_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    if ctx.node is None:
        raise LookupError(f"longhorn node {ctx.pod.spec.node_name} not found")
    if condition_status(ctx.node.status.conditions, "Ready") != "True":
        return True
    expected = instance_manager_cpu_request(ctx.im.spec.data_engine, s, ctx.node, ctx.kube_node)
    container = _container(ctx.pod)
    current = container.resources.requests.get("cpu") if container else None
    return same_cpu_request(expected, current)


def priority_class_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    return ctx.pod.spec.priority_class_name == s.priority_class


def storage_network_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    current = ctx.pod.metadata.annotations.get(CNI_NETWORKS_ANNOTATION, "")
    return current == cni_annotation(s.storage_network, STORAGE_NETWORK_INTERFACE)


def v1_data_engine_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    return s.v1_data_engine or ctx.im.spec.data_engine != "v1"


def v2_data_engine_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    return s.v2_data_engine or ctx.im.spec.data_engine != "v2"


def liveness_probe_timeout_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    container = _container(ctx.pod)
    if container is None or container.liveness_probe is None:
        return True
    return container.liveness_probe.timeout_seconds == s.instance_manager_liveness_probe_timeout


def log_path_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    """v2 only (Longhorn has a TODO for v1). Compared with the path the pod builder would use."""
    container = _container(ctx.pod)
    if _is_v1(ctx) or container is None or container.volume_mounts is None:
        return True
    expected = instance_manager_log_path(s.log_path, control_path=ctx.control_path)
    for volume in ctx.pod.spec.volumes:
        if volume.name == "log":
            return volume.host_path is not None and go_clean(volume.host_path.path) == expected
    return True


def interrupt_mode_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    if _is_v1(ctx):
        return True
    wanted = s.for_engine(s.interrupt_mode_enabled, N.DATA_ENGINE_INTERRUPT_MODE_ENABLED, "v2")
    return ctx.im.status.data_engine_status.v2.interrupt_mode_enabled == ("true" if wanted else "false")


def _iobuf_synced(size: int, spdk_default: int, flag: str, ctx: PodContext) -> bool:
    if _is_v1(ctx):
        return True
    container = _container(ctx.pod)
    if container is None:
        return False
    expected = str(size) if size > spdk_default else ""
    return _arg_value(container.args, flag) == expected


def iobuf_large_pool_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    if _is_v1(ctx):
        return True
    size = s.for_engine(s.iobuf_large_pool_size, N.DATA_ENGINE_IOBUF_LARGE_POOL_SIZE, "v2")
    assert isinstance(size, int)
    return _iobuf_synced(size, SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE, "--spdk-iobuf-large-pool-size", ctx)


def iobuf_small_pool_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    if _is_v1(ctx):
        return True
    size = s.for_engine(s.iobuf_small_pool_size, N.DATA_ENGINE_IOBUF_SMALL_POOL_SIZE, "v2")
    assert isinstance(size, int)
    return _iobuf_synced(size, SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE, "--spdk-iobuf-small-pool-size", ctx)


def cpu_isolation_synced(s: DangerZoneSettings, ctx: PodContext) -> bool:
    container = _container(ctx.pod)
    if _is_v1(ctx) or container is None:
        return True
    return resolve_cpu_isolation(ctx.im, s) == all(flag in container.args for flag in CPU_ISOLATION_FLAGS)


Predicate = Callable[[DangerZoneSettings, PodContext], bool]

PREDICATES: dict[SettingName, Predicate] = {
    N.TAINT_TOLERATION: taint_toleration_synced,
    N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR: node_selector_synced,
    N.GUARANTEED_INSTANCE_MANAGER_CPU: guaranteed_cpu_synced,
    N.PRIORITY_CLASS: priority_class_synced,
    N.STORAGE_NETWORK: storage_network_synced,
    N.V1_DATA_ENGINE: v1_data_engine_synced,
    N.V2_DATA_ENGINE: v2_data_engine_synced,
    N.INSTANCE_MANAGER_POD_LIVENESS_PROBE_TIMEOUT: liveness_probe_timeout_synced,
    N.LOG_PATH: log_path_synced,
    N.DATA_ENGINE_INTERRUPT_MODE_ENABLED: interrupt_mode_synced,
    N.DATA_ENGINE_IOBUF_LARGE_POOL_SIZE: iobuf_large_pool_synced,
    N.DATA_ENGINE_IOBUF_SMALL_POOL_SIZE: iobuf_small_pool_synced,
    N.DATA_ENGINE_CPU_ISOLATION_ENABLED: cpu_isolation_synced,
}
"""§4.5's table; every other danger-zone setting counts as synced here."""


def unsynced_settings(settings: DangerZoneSettings, ctx: PodContext) -> tuple[SettingName, ...]:
    """The danger-zone settings the pod lags, in table order (Longhorn's order is random)."""
    return tuple(name for name in DANGER_ZONE if name in PREDICATES and not PREDICATES[name](settings, ctx))


def cpu_mask_applied(settings: DangerZoneSettings, im: InstanceManager) -> bool:
    """§4.3 step 3: v2 running IMs must run with the wanted core count or CPU mask."""
    if im.spec.data_engine == "v1" or im.status.current_state != "running":
        return True
    status = im.status.data_engine_status.v2
    cores = settings.for_engine(settings.number_of_cpu_cores, N.DATA_ENGINE_NUMBER_OF_CPU_CORES, "v2")
    assert isinstance(cores, int)
    if cores > 0:
        return status.cpu_core_number == cores
    if im.spec.data_engine_spec.v2.cpu_mask:
        return im.spec.data_engine_spec.v2.cpu_mask == status.cpu_mask
    return settings.for_engine(settings.cpu_mask, N.DATA_ENGINE_CPU_MASK, "v2") == status.cpu_mask


class HugepageCheck(msgspec.Struct, frozen=True):
    """§4.3 step 4. `applied`: the pod may be kept as is (synced, or the node could not take a new
    one); `synced`: the pod's hugepage limit and `--spdk-memory-size` match the settings."""

    applied: bool
    synced: bool


def hugepage_check(
    settings: DangerZoneSettings, im: InstanceManager, pod: Pod | None, kube_node: KubeNode | None
) -> HugepageCheck:
    if im.spec.data_engine == "v1" or im.status.current_state != "running" or pod is None:
        return HugepageCheck(applied=True, synced=True)
    enabled = bool(settings.for_engine(settings.hugepage_enabled, N.DATA_ENGINE_HUGEPAGE_ENABLED, "v2"))
    memory = settings.for_engine(settings.memory_size_mib, N.DATA_ENGINE_MEMORY_SIZE, "v2")
    assert isinstance(memory, int)
    container = _container(pod)
    limit_synced = container is not None and same_quantity(
        container.resources.limits.get("hugepages-2Mi"), f"{memory if enabled else 0}Mi"
    )
    arg_synced = container is not None and _arg_value(container.args, "--spdk-memory-size") == str(memory)
    if limit_synced and arg_synced:
        return HugepageCheck(applied=True, synced=True)
    has_capacity = True
    if enabled:
        if kube_node is None:
            raise LookupError(f"kubernetes node {im.spec.node_id} not found")
        total = kube_node.status.allocatable.get("hugepages-2Mi")
        if total is None:
            total = kube_node.status.capacity.get("hugepages-2Mi")
        has_capacity = parse_quantity(total or "0") >= parse_quantity(f"{memory}Mi")
    return HugepageCheck(applied=not has_capacity, synced=False)


class SyncVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """§4.3 step 5 (`areDangerZoneSettingsSyncedToIMPod`)."""

    synced: bool
    unsynced: tuple[SettingName, ...] = ()
    pod_gone_or_not_running: bool = False
    instances_running: bool = False


def danger_zone_sync(
    settings: DangerZoneSettings, ctx: PodContext | None, im: InstanceManager
) -> SyncVerdict:
    """IM not running → pod gone/not running; an engine, engine-frontend or replica instance
    running or starting → instances running; no pod (`ctx` None) → pod gone; else the predicates."""
    if im.status.current_state != "running":
        return SyncVerdict(synced=False, pod_gone_or_not_running=True)
    instances = (
        *im.status.instance_engines.values(),
        *im.status.instance_engine_frontends.values(),
        *im.status.instance_replicas.values(),
    )
    if any(instance.status.state in ACTIVE_INSTANCE_STATES for instance in instances):
        return SyncVerdict(synced=False, instances_running=True)
    if ctx is None:
        return SyncVerdict(synced=False, pod_gone_or_not_running=True)
    unsynced = unsynced_settings(settings, ctx)
    return SyncVerdict(synced=not unsynced, unsynced=unsynced)


def not_synced_message(unsynced: tuple[str, ...], *, hugepage_blocked: bool = False) -> str:
    """The SettingSynced=False condition message, `Settings [a b] are not synced` (Go's `%v`), with
    §4.3 step 6's suffix when a hugepage mismatch on a node without capacity blocks deletion."""
    message = f"Settings [{' '.join(unsynced)}] are not synced"
    if hugepage_blocked:
        message += HUGEPAGE_BLOCKED_SUFFIX
    return message
