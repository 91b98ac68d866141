"""One instance manager judged: delete its pod or not, why, and the SettingSynced condition it
should carry (§4.3 steps 3-7). Pure; every "synced" rule is `corral_dangerzone`'s.

The IM's state is read from its pod first, as Longhorn's `syncStatusWithPod` recomputes it right
before `handlePod`: corral sees the IM status and the pod as separate events, and a status that
lags its pod must never get a fresh pod deleted (an `error` status left over from the pod just
replaced). So a pod in a failed phase is deleted whatever the status says, and the settings rules
apply only when the status and the pod both say `running`.

Deliberate difference: the condition is computed for every running IM with a pod, busy or idle.
Longhorn evaluates it only for idle IMs, so a busy IM's condition stays stale until it is idle;
corral tells the operator which settings a busy IM waits for (IM-02).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.synced import (
    ACTIVE_INSTANCE_STATES,
    HugepageCheck,
    PodContext,
    cpu_mask_applied,
    hugepage_check,
    not_synced_message,
    unsynced_settings,
)
from corral_dangerzone.table import SettingName
from corral_im_restart.reasons import DELETE_REASONS, Reason
from corral_model.longhorn import Condition, InstanceManager, KubeNode, Node, Pod

SETTING_SYNCED = "SettingSynced"
SETTING_NOT_SYNCED = "SettingNotSynced"
HUGEPAGE_SETTINGS = (SettingName.DATA_ENGINE_HUGEPAGE_ENABLED, SettingName.DATA_ENGINE_MEMORY_SIZE)


class Judgement(msgspec.Struct, frozen=True, kw_only=True):
    reason: Reason
    detail: str = ""
    unsynced: tuple[str, ...] = ()
    """The settings the pod lags (table order; the hugepage pair last, as Longhorn appends it)."""
    condition: Condition | None = None
    """The SettingSynced condition the IM should carry; None: leave it as it is (as Longhorn)."""
    busy: tuple[str, ...] = ()
    """Names of its instances that are `running` or `starting`."""

    @property
    def delete(self) -> bool:
        return self.reason in DELETE_REASONS


def pod_state(pod: Pod) -> str:
    """`syncStatusWithPod` for a pod that exists and is not terminating: `starting`, `running` or
    `error`. A pod without a phase yet (just created) counts as Pending, not as failed."""
    phase = pod.status.phase
    if phase in ("", "Pending"):
        return "starting"
    if phase == "Running":
        ready = all(c.ready for c in pod.status.container_statuses)
        return "running" if ready else "starting"
    return "error"


def busy_instances(im: InstanceManager) -> tuple[str, ...]:
    status = im.status
    return tuple(
        sorted(
            name
            for instances in (
                status.instance_engines,
                status.instance_engine_frontends,
                status.instance_replicas,
            )
            for name, instance in instances.items()
            if instance.status.state in ACTIVE_INSTANCE_STATES
        )
    )


def synced_condition(unsynced: tuple[str, ...], hugepage_blocked: bool) -> Condition:
    if not unsynced:
        return Condition(type=SETTING_SYNCED, status="True")
    return Condition(
        type=SETTING_SYNCED,
        status="False",
        reason=SETTING_NOT_SYNCED,
        message=not_synced_message(unsynced, hugepage_blocked=hugepage_blocked),
    )


class PodCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What the settings rules say about a running pod, whoever runs in it (memoised by shape,
    see shapes.py): the lagging settings (hugepage pair included), whether a hugepage mismatch
    blocks deletion, and §4.3 step 3."""

    unsynced: tuple[str, ...]
    hugepage_blocked: bool
    deletion_needed: bool
    cpu_mask_applied: bool


def pod_check(
    im: InstanceManager, pod: Pod, settings: DangerZoneSettings, node: Node | None, kube_node: KubeNode | None
) -> PodCheck:
    """§4.5 predicates and §4.3 steps 3-4 and 6 for a running pod. Raises LookupError or
    SettingValueError when a predicate cannot be evaluated (Longhorn's sync fails)."""
    ctx = PodContext(im=im, pod=pod, node=node, kube_node=kube_node)
    unsynced: tuple[str, ...] = unsynced_settings(settings, ctx)
    synced = not unsynced
    try:
        hugepages = hugepage_check(settings, im, pod, kube_node)
    except (LookupError, SettingValueError):
        hugepages = HugepageCheck(applied=True, synced=False)  # §4.3 step 4: a verification error
    blocked = False
    if not hugepages.synced:
        unsynced = (*unsynced, *HUGEPAGE_SETTINGS)
        blocked = hugepages.applied
    cpu_mask_ok = cpu_mask_applied(settings, im)
    return PodCheck(
        unsynced=unsynced,
        hugepage_blocked=blocked,
        # §4.3 step 7 for an idle running IM: deletion not required = synced && cpu && hugepages.
        deletion_needed=not (synced and cpu_mask_ok and hugepages.applied),
        cpu_mask_applied=cpu_mask_ok,
    )


CheckPod = Callable[[InstanceManager, Pod, DangerZoneSettings, "Node | None", "KubeNode | None"], PodCheck]


def judge(
    im: InstanceManager,
    pod: Pod | None,
    settings: DangerZoneSettings | SettingValueError,
    node: Node | None,
    kube_node: KubeNode | None,
    check: CheckPod = pod_check,
) -> Judgement:
    """`node` is the Longhorn node the pod runs on (guaranteed CPU), `kube_node` the Kubernetes node
    of `im.spec.nodeID` (allocatable CPU, hugepage capacity). `check` is `pod_check` or a memo of it.

    The early exits are `danger_zone_sync`'s (state, busy, pod missing), reordered so the state
    comes from the pod and a busy IM still gets its condition."""
    if pod is None:
        return Judgement(reason=Reason.POD_MISSING)
    if pod.metadata.deletion_timestamp:
        return Judgement(reason=Reason.POD_TERMINATING)
    state = pod_state(pod)
    if state == "error":
        return Judgement(reason=Reason.POD_FAILED, detail=f"pod phase {pod.status.phase}")
    im_state = im.status.current_state
    if state != "running" or im_state != "running":
        return Judgement(reason=Reason.NOT_RUNNING, detail=f"instance manager {im_state or '-'}, pod {state}")
    if isinstance(settings, SettingValueError):
        return Judgement(reason=Reason.SETTINGS_INVALID, detail=str(settings))
    try:
        result = check(im, pod, settings, node, kube_node)
    except (LookupError, SettingValueError) as e:
        return Judgement(reason=Reason.CHECK_FAILED, detail=str(e))
    unsynced = result.unsynced
    condition = synced_condition(unsynced, result.hugepage_blocked)
    busy = busy_instances(im)
    if busy:
        return Judgement(
            reason=Reason.BUSY, detail=", ".join(busy), unsynced=unsynced, condition=condition, busy=busy
        )
    if result.hugepage_blocked:
        return Judgement(
            reason=Reason.HUGEPAGE_CAPACITY,
            detail="the node's hugepages-2Mi cannot take the new memory size",
            unsynced=unsynced,
            condition=condition,
        )
    if not result.deletion_needed:
        return Judgement(reason=Reason.SETTINGS_SYNCED, condition=condition)
    detail = ", ".join(unsynced)
    if not result.cpu_mask_applied:
        detail = f"{detail}; cpu mask not applied" if detail else "cpu mask not applied"
    return Judgement(reason=Reason.SETTINGS_UNSYNCED, detail=detail, unsynced=unsynced, condition=condition)
