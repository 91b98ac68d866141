"""What an instance-manager pod must carry for the current danger-zone settings (§4.4,
`createInstanceManagerPodSpec`): the fields a restarted pod would get.

The sandbox simulator builds IM pods from it, and the im-restart rules compare running pods with the
same rules (`synced`), so "what a new pod looks like" and "is this pod stale" cannot drift apart.
Only setting-derived fields are here; fixed plumbing (service account, env, host mounts, probe
command text, owner reference, labels) is the pod builder's business.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

import msgspec

from corral_dangerzone.cpu_request import instance_manager_cpu_request
from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.network import STORAGE_NETWORK_INTERFACE, cni_annotation
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import (
    DEFAULT_CONTROL_PATH,
    SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE,
    SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE,
    SettingName,
    default_log_path,
)
from corral_dangerzone.tolerations import distinct_tolerations, last_applied_annotation
from corral_model.longhorn import (
    Container,
    HostPath,
    InstanceManager,
    KubeNode,
    Node,
    ObjectMeta,
    Pod,
    PodSpec,
    PodVolume,
    Probe,
    ResourceRequirements,
    Toleration,
    VolumeMount,
)

IM_PROCESS_MANAGER_PORT = 8500
IM_PROBE_INITIAL_DELAY_SECONDS = 3
IM_PROBE_FAILURE_THRESHOLD = 6
V2_MEMORY = "128Mi"
CPU_ISOLATION_FLAGS = ("--enable-irq-affinity", "--enable-workqueue-affinity", "--enable-rps")
N = SettingName


def go_clean(path: str) -> str:
    """Go's `filepath.Clean` on Linux (Python's normpath keeps a leading `//`)."""
    cleaned = posixpath.normpath(path) if path else "."
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def instance_manager_log_path(setting: str, *, control_path: str = DEFAULT_CONTROL_PATH) -> str:
    """The `log` hostPath (`getLogPath`): cleaned; the default when empty, `/`, or when its parent
    would be `/` or `.`. (Longhorn also falls back when the parent does not exist on the manager's
    host; a pure library cannot look, so that case is the caller's.)"""
    fallback = default_log_path(control_path)
    path = fallback if setting in ("", "/") else go_clean(setting)
    if posixpath.dirname(path) in (".", "/", ""):
        return fallback
    return path


class V2Status(msgspec.Struct, frozen=True, kw_only=True):
    """What Longhorn records in `status.dataEngineStatus.v2` when it creates a v2 IM pod."""

    cpu_mask: str
    cpu_core_number: int
    interrupt_mode_enabled: str


class ExpectedInstanceManagerPod(msgspec.Struct, frozen=True, kw_only=True):
    node_name: str
    tolerations: tuple[Toleration, ...]
    """`spec.tolerations`, de-duplicated by Longhorn's identity."""
    annotations: Mapping[str, str]
    """last-applied tolerations always; the storage-network annotation when the setting is set."""
    node_selector: Mapping[str, str]
    priority_class_name: str
    resources: ResourceRequirements
    """containers[0]: CPU request (absent when 0); v2 adds memory, hugepages, and CPU/memory limits
    when a number of CPU cores is set."""
    args: tuple[str, ...]
    liveness_probe: Probe
    log_host_path: str
    v2_status: V2Status | None = None

    def to_pod(self, name: str, namespace: str = "", *, image: str = "") -> Pod:
        """A Pod carrying exactly these fields (plus the `log` volume and its mount), for a
        simulator that creates IM pods or a test that needs a pod in line with the settings."""
        container = Container(
            name="instance-manager",
            image=image,
            args=self.args,
            resources=self.resources,
            liveness_probe=self.liveness_probe,
            volume_mounts=(VolumeMount(name="log", mount_path="/log"),),
        )
        return Pod(
            metadata=ObjectMeta(name=name, namespace=namespace, annotations=dict(self.annotations)),
            spec=PodSpec(
                node_name=self.node_name,
                node_selector=dict(self.node_selector),
                tolerations=self.tolerations,
                priority_class_name=self.priority_class_name,
                containers=(container,),
                volumes=(PodVolume(name="log", host_path=HostPath(path=self.log_host_path)),),
            ),
        )


def _resolve_cpu_isolation(im: InstanceManager, settings: DangerZoneSettings) -> bool:
    """`resolveCPUIsolationEnabled`: the IM's "true"/"false" override, else the v2 setting."""
    override = im.spec.data_engine_spec.v2.cpu_isolation_enabled
    if override in ("true", "false"):
        return override == "true"
    return bool(
        settings.for_engine(settings.cpu_isolation_enabled, N.DATA_ENGINE_CPU_ISOLATION_ENABLED, "v2")
    )


def resolve_cpu_isolation(im: InstanceManager, settings: DangerZoneSettings) -> bool:
    return _resolve_cpu_isolation(im, settings)


def _int(settings: DangerZoneSettings, values: Mapping[str, int], name: SettingName, engine: str) -> int:
    value = settings.for_engine(values, name, engine)
    assert isinstance(value, int)
    return value


def _v2_args(
    im: InstanceManager, settings: DangerZoneSettings, *, log_flags: str, control_path: str
) -> tuple[tuple[str, ...], V2Status, int, bool, int]:
    engine = "v2"
    cores = _int(settings, settings.number_of_cpu_cores, N.DATA_ENGINE_NUMBER_OF_CPU_CORES, engine)
    cpu_mask = ""
    if cores == 0:
        cpu_mask = im.spec.data_engine_spec.v2.cpu_mask or str(
            settings.for_engine(settings.cpu_mask, N.DATA_ENGINE_CPU_MASK, engine)
        )
        if not cpu_mask:
            raise SettingValueError(f"failed to get CPU mask setting for data engine {engine}")
    hugepages = bool(settings.for_engine(settings.hugepage_enabled, N.DATA_ENGINE_HUGEPAGE_ENABLED, engine))
    memory = _int(settings, settings.memory_size_mib, N.DATA_ENGINE_MEMORY_SIZE, engine)
    large = _int(settings, settings.iobuf_large_pool_size, N.DATA_ENGINE_IOBUF_LARGE_POOL_SIZE, engine)
    small = _int(settings, settings.iobuf_small_pool_size, N.DATA_ENGINE_IOBUF_SMALL_POOL_SIZE, engine)
    interrupt = bool(
        settings.for_engine(settings.interrupt_mode_enabled, N.DATA_ENGINE_INTERRUPT_MODE_ENABLED, engine)
    )
    args = [
        "start-spdk-tgt",
        *("--spdk-log", log_flags.lower() if log_flags else "all"),
        *("--spdk-cpumask", cpu_mask),
        *("--spdk-core-number", str(cores)),
        *("--spdk-memory-size", str(memory)),
    ]
    if large > SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE:
        args += ["--spdk-iobuf-large-pool-size", str(large)]
    if small > SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE:
        args += ["--spdk-iobuf-small-pool-size", str(small)]
    args += ["--longhorn-control-path", control_path, "--enable-spdk", "--debug", "daemon", "--spdk-enabled"]
    args += ["--listen", f"0.0.0.0:{IM_PROCESS_MANAGER_PORT}"]
    if interrupt:
        args.append("--spdk-interrupt-mode")
    if resolve_cpu_isolation(im, settings):
        args += CPU_ISOLATION_FLAGS
    if not hugepages:
        args.append("--spdk-no-hugepage")
    status = V2Status(
        cpu_mask=cpu_mask, cpu_core_number=cores, interrupt_mode_enabled="true" if interrupt else "false"
    )
    return tuple(args), status, cores, hugepages, memory


def expected_instance_manager_pod(
    im: InstanceManager,
    settings: DangerZoneSettings,
    node: Node | None,
    kube_node: KubeNode | None,
    *,
    control_path: str = DEFAULT_CONTROL_PATH,
    log_flags: str = "",
) -> ExpectedInstanceManagerPod:
    """The setting-derived fields of the pod Longhorn would create for `im` now.

    `node`/`kube_node` are the IM's Longhorn and Kubernetes nodes (for the CPU request);
    `control_path` is the `default-control-path` setting, `log_flags` `data-engine-log-flags`.
    """
    engine = im.spec.data_engine
    annotations = {"longhorn.io/last-applied-tolerations": last_applied_annotation(settings.tolerations)}
    if settings.storage_network:
        annotations["k8s.v1.cni.cncf.io/networks"] = cni_annotation(
            settings.storage_network, STORAGE_NETWORK_INTERFACE
        )
    cpu = instance_manager_cpu_request(engine, settings, node, kube_node)
    requests: dict[str, str] = {"cpu": cpu} if cpu is not None else {}
    limits: dict[str, str] = {}
    v2_status = None
    if engine == "v2":
        args, v2_status, cores, hugepages, memory = _v2_args(
            im, settings, log_flags=log_flags, control_path=control_path
        )
        requests["memory"] = V2_MEMORY
        limits["hugepages-2Mi"] = f"{memory if hugepages else 0}Mi"
        if cores != 0:
            limits["cpu"] = requests.get("cpu", str(cores))
            requests.setdefault("cpu", str(cores))
            limits["memory"] = V2_MEMORY
    else:
        args = ("instance-manager", "--debug", "daemon", "--listen", f":{IM_PROCESS_MANAGER_PORT}")
    timeout = settings.instance_manager_liveness_probe_timeout
    return ExpectedInstanceManagerPod(
        node_name=im.spec.node_id,
        tolerations=distinct_tolerations(settings.tolerations),
        annotations=annotations,
        node_selector=dict(settings.node_selector),
        priority_class_name=settings.priority_class,
        resources=ResourceRequirements(requests=requests, limits=limits),
        args=args,
        liveness_probe=Probe(
            timeout_seconds=timeout,
            period_seconds=timeout + 1,
            initial_delay_seconds=IM_PROBE_INITIAL_DELAY_SECONDS,
            failure_threshold=IM_PROBE_FAILURE_THRESHOLD,
        ),
        log_host_path=instance_manager_log_path(settings.log_path, control_path=control_path),
        v2_status=v2_status,
    )
