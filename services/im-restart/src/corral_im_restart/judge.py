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
from corral_im_restart.reasons import Reason
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
        reason = self.reason  # (identity: an Enum's hash is a Python-level call, and this is per event)
        return reason is Reason.SETTINGS_UNSYNCED or reason is Reason.POD_FAILED


def pod_state(pod: Pod) -> str:
    """`syncStatusWithPod` for a pod that exists and is not terminating: `starting`, `running` or
    `error`. A pod without a phase yet (just created) counts as Pending, not as failed."""
    phase = pod.status.phase
    if phase == "Running":
        for container in pod.status.container_statuses:
            if not container.ready:
                return "starting"
        return "running"
    return "starting" if phase in ("", "Pending") else "error"


def busy_instances(im: InstanceManager) -> tuple[str, ...]:
    """Its engine, engine-frontend and replica instances that are `running` or `starting`, by name.
    (Per event on every IM: plain loops, and nothing built for an idle IM.)"""
    status = im.status
    busy: list[str] = []
    for instances in (status.instance_engines, status.instance_engine_frontends, status.instance_replicas):
        if instances:
            for name, instance in instances.items():
                if instance.status.state in ACTIVE_INSTANCE_STATES:
                    busy.append(name)
    if not busy:
        return ()
    busy.sort()
    return tuple(busy)


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
    condition: Condition
    """The SettingSynced condition these say (built once per shape, shared by its IMs)."""
    synced_judgement: Judgement | None = None
    """The judgement of an idle IM with this pod when nothing is to be done (shared likewise)."""


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
    # §4.3 step 7 for an idle running IM: deletion not required = synced && cpu && hugepages.
    deletion_needed = not (synced and cpu_mask_ok and hugepages.applied)
    condition = synced_condition(unsynced, blocked)
    return PodCheck(
        unsynced=unsynced,
        hugepage_blocked=blocked,
        deletion_needed=deletion_needed,
        cpu_mask_applied=cpu_mask_ok,
        condition=condition,
        synced_judgement=None
        if deletion_needed or blocked
        else Judgement(reason=Reason.SETTINGS_SYNCED, condition=condition),
    )


def judge_state(im: InstanceManager, pod: Pod | None, state: str = "") -> Judgement | None:
    """Everything decided before the settings rules (`danger_zone_sync`'s early exits, the state
    read from the pod, or `state` when the caller has it already); None: the IM and its pod run,
    the settings rules decide."""
    if pod is None:
        return Judgement(reason=Reason.POD_MISSING)
    if pod.metadata.deletion_timestamp:
        return Judgement(reason=Reason.POD_TERMINATING)
    state = state or pod_state(pod)
    if state == "error":
        return Judgement(reason=Reason.POD_FAILED, detail=f"pod phase {pod.status.phase}")
    im_state = im.status.current_state
    if state != "running" or im_state != "running":
        return Judgement(reason=Reason.NOT_RUNNING, detail=f"instance manager {im_state or '-'}, pod {state}")
    return None


def judge(
    im: InstanceManager,
    pod: Pod | None,
    settings: DangerZoneSettings | SettingValueError,
    node: Node | None,
    kube_node: KubeNode | None,
) -> Judgement:
    """`node` is the Longhorn node the pod runs on (guaranteed CPU), `kube_node` the Kubernetes node
    of `im.spec.nodeID` (allocatable CPU, hugepage capacity). The decider does the same in steps,
    with `pod_check` memoised (shapes.py).

    The early exits are `danger_zone_sync`'s (state, busy, pod missing), reordered so the state
    comes from the pod and a busy IM still gets its condition."""
    early = judge_state(im, pod)
    if early is not None:
        return early
    assert pod is not None
    if isinstance(settings, SettingValueError):
        return Judgement(reason=Reason.SETTINGS_INVALID, detail=str(settings))
    try:
        check = pod_check(im, pod, settings, node, kube_node)
    except (LookupError, SettingValueError) as e:
        return Judgement(reason=Reason.CHECK_FAILED, detail=str(e))
    return judge_running(im, check)


def judge_running(im: InstanceManager, check: PodCheck) -> Judgement:
    """A running IM with a running pod, given what the settings rules say about the pod."""
    busy = busy_instances(im)
    if busy:
        return Judgement(
            reason=Reason.BUSY,
            detail=", ".join(busy),
            unsynced=check.unsynced,
            condition=check.condition,
            busy=busy,
        )
    if check.synced_judgement is not None:
        return check.synced_judgement
    unsynced, condition = check.unsynced, check.condition
    if check.hugepage_blocked:
        return Judgement(
            reason=Reason.HUGEPAGE_CAPACITY,
            detail="the node's hugepages-2Mi cannot take the new memory size",
            unsynced=unsynced,
            condition=condition,
        )
    detail = ", ".join(unsynced)
    if not check.cpu_mask_applied:
        detail = f"{detail}; cpu mask not applied" if detail else "cpu mask not applied"
    return Judgement(reason=Reason.SETTINGS_UNSYNCED, detail=detail, unsynced=unsynced, condition=condition)
