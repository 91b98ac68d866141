"""SIM-V2 for instance managers: how a v2 (SPDK) IM pod encodes the data-engine settings, and what
the IM status records from it (longhorn-behaviour.md §4.4, "v2 only").

Without this a v2 IM pod would lag the hugepage, memory, CPU-mask, iobuf, interrupt-mode and
CPU-isolation settings from birth, and a correct im-restart would restart it forever. The
simulator's own reading of §4.4, deliberately not corral's (corral_dangerzone), so the sandbox
stays an independent oracle.

The IM status's `dataEngineStatus.v2` (cpuMask, cpuCoreNumber, interruptModeEnabled) is read back
from the pod's args rather than remembered: Longhorn records it when it creates the pod, and the
args are that record, so a simulator restart loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral_sandbox.simulator.settings import as_bool, as_int, data_engine_value

SPDK_DEFAULT_IOBUF_LARGE = 1024
SPDK_DEFAULT_IOBUF_SMALL = 8192
CPU_ISOLATION_FLAGS = ("--enable-irq-affinity", "--enable-workqueue-affinity", "--enable-rps")
HUGEPAGES = "hugepages-2Mi"
CONTROL_PATH = "/var/lib/longhorn"


def _v2(setting: Callable[[str], str], name: str) -> str:
    return data_engine_value(setting(name), "v2")


def hugepages_enabled(setting: Callable[[str], str]) -> bool:
    return as_bool(_v2(setting, "data-engine-hugepage-enabled"))


def memory_size_mib(setting: Callable[[str], str]) -> int:
    return as_int(_v2(setting, "data-engine-memory-size"), 2048)


def _cpu_isolation(im: dict[str, Any], setting: Callable[[str], str]) -> bool:
    override = str(
        im.get("spec", {}).get("dataEngineSpec", {}).get("v2", {}).get("cpuIsolationEnabled", "") or ""
    )
    if override in ("true", "false"):
        return override == "true"
    return as_bool(_v2(setting, "data-engine-cpu-isolation-enabled"))


def v2_args(im: dict[str, Any], setting: Callable[[str], str]) -> list[str]:
    """`start-spdk-tgt …` as createInstanceManagerPodSpec builds it from the current settings."""
    cores = as_int(_v2(setting, "data-engine-number-of-cpu-cores"), 0)
    mask = ""
    if cores == 0:
        own = str(im.get("spec", {}).get("dataEngineSpec", {}).get("v2", {}).get("cpuMask", "") or "")
        mask = own or _v2(setting, "data-engine-cpu-mask")
    args = [
        "start-spdk-tgt",
        "--spdk-log",
        "all",
        "--spdk-cpumask",
        mask,
        "--spdk-core-number",
        str(cores),
        "--spdk-memory-size",
        str(memory_size_mib(setting)),
    ]
    large = as_int(_v2(setting, "data-engine-iobuf-large-pool-size"), SPDK_DEFAULT_IOBUF_LARGE)
    small = as_int(_v2(setting, "data-engine-iobuf-small-pool-size"), SPDK_DEFAULT_IOBUF_SMALL)
    if large > SPDK_DEFAULT_IOBUF_LARGE:
        args += ["--spdk-iobuf-large-pool-size", str(large)]
    if small > SPDK_DEFAULT_IOBUF_SMALL:
        args += ["--spdk-iobuf-small-pool-size", str(small)]
    args += [
        "--longhorn-control-path",
        CONTROL_PATH,
        "--enable-spdk",
        "--debug",
        "daemon",
        "--spdk-enabled",
        "--listen",
        "0.0.0.0:8500",
    ]
    if as_bool(_v2(setting, "data-engine-interrupt-mode-enabled")):
        args.append("--spdk-interrupt-mode")
    if _cpu_isolation(im, setting):
        args += list(CPU_ISOLATION_FLAGS)
    if not hugepages_enabled(setting):
        args.append("--spdk-no-hugepage")
    return args


def v2_resources(setting: Callable[[str], str], cpu_request: str) -> dict[str, Any]:
    """Requests and limits: 128Mi of memory, the hugepage limit (0 when off), and with a fixed core
    count the CPU limit equal to the request."""
    hugepages = f"{memory_size_mib(setting)}Mi" if hugepages_enabled(setting) else "0"
    requests: dict[str, str] = {"memory": "128Mi"}
    limits: dict[str, str] = {HUGEPAGES: hugepages}
    if cpu_request:
        requests["cpu"] = cpu_request
    if as_int(_v2(setting, "data-engine-number-of-cpu-cores"), 0) > 0:
        limits["memory"] = "128Mi"
        if cpu_request:
            limits["cpu"] = cpu_request
    return {"requests": requests, "limits": limits}


def _arg(args: list[str], flag: str) -> str:
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return str(args[index + 1])
    return ""


def recorded_status(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """`status.dataEngineStatus` of a v2 IM as recorded when its pod was made (None: no v2 pod)."""
    if pod is None:
        return None
    containers = pod.get("spec", {}).get("containers") or [{}]
    args = [str(a) for a in containers[0].get("args", []) or []]
    if not args or args[0] != "start-spdk-tgt":
        return None
    return {
        "v2": {
            "cpuMask": _arg(args, "--spdk-cpumask"),
            "cpuCoreNumber": as_int(_arg(args, "--spdk-core-number"), 0),
            "interruptModeEnabled": "true" if "--spdk-interrupt-mode" in args else "false",
        }
    }
