"""The im-restart decider: Longhorn's instance-manager `handlePod` decision (longhorn-behaviour.md
§4.3) as a `corral_decision.Decider`. Pure: no I/O, injected clock.

* `apply(event)` folds an event into the view (view.py) and marks the IMs it touched; a
  danger-zone setting change marks every IM, and the settings are parsed once, at the next decision;
* `decide()` judges the marked IMs (judge.py, memoised by pod shape: shapes.py) and returns, per IM,
  at most one pod delete and at most one SettingSynced patch;
* a delete is an expectation (the kit's) until the view shows a fresher pod (deleted, terminating,
  replaced or merely changed: the delete was preconditioned on the pod's resourceVersion, so it
  applied or can no longer apply), a refusal comes back, or `command_ttl` passes. So the same pod
  is never deleted twice, and any number of settings pending on a busy IM lead to one delete once
  it is idle;
* a refusal frees what the command held; the IM is judged again, but the same command is not sent
  again until the view holds a fresher object than the refused decision used, or `retry_backoff`.
  The kit keeps both on the IM's record (`ImRecord.delete`, `.condition`): no parallel tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec

from corral_dangerzone.errors import SettingValueError
from corral_decision.base import DeciderBase, TargetKey
from corral_decision.decider import Clock, Explanation, InvalidEvent
from corral_decision.expectations import Expectation, Track
from corral_decision.settle import settle_until
from corral_decision.timing import Timing
from corral_im_restart.commands import SERVICE, condition_differs, delete_pod, patch_condition
from corral_im_restart.judge import Judgement, judge_running, judge_state
from corral_im_restart.limits import RestartSlots
from corral_im_restart.reasons import Reason
from corral_im_restart.records import Restart
from corral_im_restart.shapes import ShapeMemo
from corral_im_restart.view import ImKey, ImRecord, ImView
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent, Target, Verb

READS: dict[str, type[Any]] = {
    "instancemanager": lh.InstanceManager,
    "pod": lh.Pod,
    "setting": lh.Setting,
    "node": lh.Node,
    "kubenode": lh.KubeNode,
}
# Module constants: an Enum member looked up on its class costs a call per event on the hot path.
_RESYNCED, _DELETED = EventType.RESYNCED, EventType.DELETED
_RUNNING_REASONS = frozenset(
    {Reason.SETTINGS_SYNCED, Reason.SETTINGS_UNSYNCED, Reason.BUSY, Reason.HUGEPAGE_CAPACITY}
)
_IDLE_REASONS = _RUNNING_REASONS - {Reason.BUSY}


def pod_terminating(pod: lh.Pod | None) -> bool:
    return pod is not None and bool(pod.metadata.deletion_timestamp)


def _pod_moved_on(sent: Expectation, pod: lh.Pod | None, pod_rv: int) -> bool:
    """A delete settles once the view shows the pod gone, replaced, terminating or merely fresher
    (it was preconditioned on the resourceVersion)."""
    return (
        pod is None
        or pod.metadata.uid != sent.basis
        or bool(pod.metadata.deletion_timestamp)
        or pod_rv > sent.decided_rv
    )


def _im_key(record: ImRecord) -> TargetKey:
    return ("InstanceManager", record.key[0], record.key[1])


class DeciderConfig(msgspec.Struct, frozen=True, kw_only=True):
    timing: Timing = Timing()
    """The kit's expectation TTLs and retry backoff."""
    max_restarts: int = 0
    """Settings restarts in flight cluster-wide; 0 = unlimited (Longhorn)."""
    max_restarts_per_node: int = 0
    """Settings restarts in flight per node; 0 = unlimited (Longhorn)."""
    restart_timeout: float = 600.0
    """How long a restart holds its slot while its replacement pod does not run."""
    settle: float = 0.0
    """After a danger-zone setting changes, an IM that was already idle waits this long since the
    latest change before its settings restart, so settings written in quick succession cost one
    restart, not one each (corral_decision.settle). An IM that turns idle later (a detach) is never held."""


class ImRestartDecider(DeciderBase):
    """The im-restart rules as a `corral_decision.Decider`."""

    def __init__(self, clock: Clock, config: DeciderConfig | None = None) -> None:
        self.config = config or DeciderConfig()
        super().__init__(clock, reads=READS, timing=self.config.timing, service=SERVICE)
        self.view = ImView()
        self.slots = RestartSlots(self.config.max_restarts, self.config.max_restarts_per_node)
        self._memo = ShapeMemo()
        self._dirty: set[ImKey] = set()
        self._bootstrapped = False
        self._settings_changed_at: float | None = None

    # --- input ------------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> None:
        struct = READS.get(event.kind)
        if struct is None:
            raise InvalidEvent(f"im-restart does not read {event.kind!r}")
        what = event.type
        if what is not _RESYNCED and what is not _DELETED and not isinstance(event.object, struct):
            raise InvalidEvent(f"{event.kind} {event.namespace}/{event.name} carries no {struct.__name__}")
        if what is _RESYNCED:
            self.observe(event)
            if self.ready and not self._bootstrapped:
                self._bootstrapped = True
                self._dirty.update(self.view.records)
            return
        # (No `observe()` per event: the view holds every resourceVersion the kit asks about, see
        # `version_at`; one dict write fewer per event on the hot path.)
        view = self.view
        touched = view.apply(event)
        if touched is None:
            if self._bootstrapped:  # (the settings listed at start-up are no change)
                self._settings_changed_at = self.clock()
            return  # the settings changed: every IM is judged at the next decision
        if not view.quiet:
            self._dirty.update(touched)
            return
        # Only resourceVersions moved: the judgement stands; a command out on this very object
        # (a delete on the pod, a condition patch on the IM) settles on a fresher version, so
        # that IM is looked at again.
        records = view.records
        on_pod = event.kind == "pod"
        for key in touched:
            record = records.get(key)
            if record is not None and _tracked(record.delete if on_pod else record.condition):
                self._dirty.add(key)

    def may_adopt(self, command: Command) -> bool:
        """Count another replica's command while it can still apply on this view: a delete of
        the very pod in view (uid and resourceVersion), a patch of the IM status in view."""
        record = self._record_for(command.target)
        if record is None:
            return False
        tested_rv = next(
            (p.value for p in command.preconditions if p.path == "/metadata/resourceVersion"), None
        )
        if command.verb is Verb.DELETE and command.target.kind == "Pod":
            pod = record.pod
            return (
                pod is not None
                and pod.metadata.uid == command.target.uid
                and tested_rv == pod.metadata.resource_version
                and not pod.metadata.deletion_timestamp
            )
        if command.verb is Verb.PATCH_STATUS and command.target.kind == "InstanceManager":
            return record.im is not None and tested_rv == record.im.metadata.resource_version
        return False

    def adopted(self, key: TargetKey, expectation: Expectation, command: Command) -> None:
        """An adopted settings restart takes its slot at once, as one of our own does."""
        record = self._record_for(command.target)
        if record is None or key[0] != "Pod":
            return
        expectation.basis = command.target.uid
        if command.reason.startswith(Reason.SETTINGS_UNSYNCED):
            self._start_restart(record, self.clock())

    # --- the kit's keys: the pod for a delete, the IM for a condition patch; tracks on the record ---

    def key_for(self, target: Target) -> TargetKey | None:
        if target.kind in ("Pod", "InstanceManager"):
            return (target.kind, target.namespace, target.name)
        return None

    def track_at(self, key: TargetKey, create: bool = False) -> Track | None:
        record = self._record_for(Target(kind=key[0], namespace=key[1], name=key[2]))
        if record is None:
            return None
        return record.delete if key[0] == "Pod" else record.condition

    def version_at(self, key: TargetKey) -> int | None:
        """The resourceVersion in view of an object this service writes (an IM pod, an IM)."""
        record = self._record_for(Target(kind=key[0], namespace=key[1], name=key[2]))
        if record is None:
            return None
        if key[0] == "Pod":
            pod = record.pod
            return record.pod_rv() if pod is not None and pod.metadata.name == key[2] else None
        return record.rv() if record.im is not None else None

    def judged_version(self, key: TargetKey) -> int | None:
        """A pod's delete is judged on its Longhorn node too (commands.delete_pod): a refusal
        holds until the pod or the node changes, not the whole retry backoff."""
        own = self.version_at(key)
        record = self._record_for(Target(kind=key[0], namespace=key[1], name=key[2]))
        if own is None or key[0] != "Pod" or record is None:
            return own
        return self._pod_judged_rv(record)

    def _pod_judged_rv(self, record: ImRecord) -> int:
        node = self.view.nodes.get(record.pod_node)
        node_rv = int(node.metadata.resource_version or 0) if node is not None else 0
        return max(record.pod_rv(), node_rv)

    def tracks(self) -> Iterator[Track]:
        """O(IMs): for takeover, metric scrapes and replay, never per event."""
        for record in self.view.records.values():
            yield record.delete
            yield record.condition

    def look_again(self, key: TargetKey) -> None:
        record = self._record_for(Target(kind=key[0], namespace=key[1], name=key[2]))
        if record is not None:
            self._dirty.add(record.key)

    # --- output -----------------------------------------------------------------------------------

    def reconcile(self, now: float) -> list[Command]:
        if not self._bootstrapped:
            return []
        marked, view = self._dirty, self.view
        if view.settings_stale and view.refresh_settings():
            marked.update(view.records)
        commands: list[Command] = []
        if marked:
            dirty = sorted(marked) if len(marked) > 1 else [marked.pop()]
            marked.clear()
            records = view.records
            for key in dirty:
                record = records.get(key)
                if record is None:
                    self.slots.end(key)
                    self.slots.unwait(key)
                    continue
                self._judge(record, now)
                self._act(record, now, commands)
        if self.slots.freed:
            self.slots.freed = False
            self._fill_slots(now, commands)
        return commands

    def reconsider_all(self) -> None:
        self._dirty.update(self.view.records)

    def explain(self, key: str | None = None) -> list[Explanation]:
        """Per IM (or the one `key` names, `InstanceManager/ns/name`): why its pod is (not) deleted."""
        if key is None:
            records = [self.view.records[k] for k in sorted(self.view.records)]
        else:
            kind, _, rest = key.partition("/")
            namespace, _, name = rest.partition("/")
            one = self.view.records.get((namespace, name)) if kind == "InstanceManager" else None
            records = [one] if one is not None else []
        out = []
        for record in records:
            if record.im is None:
                continue
            reason, detail = self._why(record)
            out.append(
                Explanation(
                    kind="InstanceManager",
                    namespace=record.key[0],
                    name=record.key[1],
                    group=record.node,
                    reason=reason,
                    detail=detail,
                )
            )
        return out

    # --- figures for metrics, progress and tests ------------------------------------------------------

    def judgement(self, namespace: str, name: str) -> Judgement | None:
        record = self.view.records.get((namespace, name))
        return record.judgement if record is not None else None

    def unsynced_by_node(self) -> dict[tuple[str, str], int]:
        """(node, setting) → IMs whose pod lags that setting (O(IMs): for scrapes)."""
        counts: Counter[tuple[str, str]] = Counter()
        for record in self.view.records.values():
            if record.judgement is not None and record.im is not None:
                for setting in record.judgement.unsynced:
                    counts[(record.node, str(setting))] += 1
        return dict(counts)

    # --- internals ----------------------------------------------------------------------------------

    def _record_for(self, target: Target) -> ImRecord | None:
        if target.kind == "Pod":
            found = self.view.record_of_pod(target.namespace, target.name)
            # A pod no longer in view: Longhorn names IM pods after their IM.
            return found or self.view.records.get((target.namespace, target.name))
        if target.kind == "InstanceManager":
            return self.view.records.get((target.namespace, target.name))
        return None

    def _judge(self, record: ImRecord, now: float) -> None:
        """Settle what the view now shows, then judge the IM afresh."""
        pod, im = record.pod, record.im
        expected, delete, condition = self.expected, record.delete, record.condition
        if _tracked(delete):
            pod_rv = record.pod_rv()
            sent = delete.expectation
            if sent is not None and _pod_moved_on(sent, pod, pod_rv):
                expected.settle(delete)
            if not expected.held(delete, self._pod_judged_rv(record), now):
                delete.hold_until = 0.0
        if _tracked(condition):
            im_rv = record.rv()
            sent = condition.expectation
            if sent is not None and (im is None or im_rv > sent.decided_rv):
                expected.settle(condition)
            if not expected.held(condition, im_rv, now):
                condition.hold_until = 0.0
        if im is None:
            record.judgement = None
            self.slots.end(record.key)
            self.slots.unwait(record.key)
            return
        judgement = judge_state(im, pod, record.pod_state)
        if judgement is None:
            assert pod is not None
            judgement = self._judge_running(record, im, pod)
        record.judgement = judgement
        if judgement.reason in _IDLE_REASONS:
            if record.idle_since is None:
                record.idle_since = now
        else:
            record.idle_since = None
        if self.slots.restarts:
            self._follow_restart(record, pod, judgement, now)

    def _judge_running(self, record: ImRecord, im: lh.InstanceManager, pod: lh.Pod) -> Judgement:
        view = self.view
        settings = view.settings
        if isinstance(settings, SettingValueError):
            return Judgement(reason=Reason.SETTINGS_INVALID, detail=str(settings))
        shape = (record.pod_shape, record.im_shape, view.node_shape(record))
        memo = self._memo
        check = memo.checks.get(shape) if settings is memo.settings else None
        if check is None:
            try:
                check = self._memo.check(
                    shape,
                    im,
                    pod,
                    settings,
                    view.nodes.get(record.pod_node),
                    view.kube_nodes.get(record.node),
                )
            except (LookupError, SettingValueError) as e:
                return Judgement(reason=Reason.CHECK_FAILED, detail=str(e))
        return judge_running(im, check)

    def _follow_restart(self, record: ImRecord, pod: lh.Pod | None, judgement: Judgement, now: float) -> None:
        restart = self.slots.restarts.get(record.key)
        if restart is not None:
            pod_uid = pod.metadata.uid if pod is not None else ""
            replaced = pod_uid != restart.old_pod_uid and judgement.reason in _RUNNING_REASONS
            # The pod it was to delete is still there, unterminated, with no delete out: it was lost.
            lost = (
                pod_uid == restart.old_pod_uid
                and record.delete.expectation is None
                and not pod_terminating(pod)
            )
            if restart.deadline <= now or replaced or lost:
                self.slots.end(record.key)

    def _act(self, record: ImRecord, now: float, commands: list[Command]) -> None:
        judgement, im, pod = record.judgement, record.im, record.pod
        if judgement is None or im is None:
            return
        wanted = judgement.condition
        if wanted is not None and self.may_send(_im_key(record), now) and condition_differs(im, wanted):
            commands.append(self.issue(patch_condition(im, wanted, now), _im_key(record), record.rv()))
        reason = judgement.reason
        if (
            (reason is not Reason.SETTINGS_UNSYNCED and reason is not Reason.POD_FAILED)
            or pod is None
            or not self._may_delete(record, now)
        ):
            if self.slots.limited:  # only a limit makes IMs wait
                self.slots.unwait(record.key)
            return
        if reason is Reason.SETTINGS_UNSYNCED:
            if record.key in self.slots.restarts:
                return  # this IM's restart is still under way
            until = self._settling_until(record, now)
            if until is not None:
                self.slots.unwait(record.key)  # (a slot freed meanwhile must not restart it early)
                self.ask_again(until, _im_key(record))
                return
            if not self.slots.free(record.node):
                self.slots.wait(record.key, record.node)
                return
        commands.append(self._delete(record, judgement, now))

    def _fill_slots(self, now: float, commands: list[Command]) -> None:
        records = self.view.records
        for node, keys in list(self.slots.waiting()):
            for key in keys:
                if not self.slots.free(node):
                    break
                record = records.get(key)
                judgement = record.judgement if record is not None else None
                if (
                    record is None
                    or judgement is None
                    or judgement.reason is not Reason.SETTINGS_UNSYNCED
                    or record.pod is None
                    or not self._may_delete(record, now)
                ):
                    self.slots.unwait(key)  # (judged since: it no longer waits)
                    continue
                commands.append(self._delete(record, judgement, now))

    def _delete(self, record: ImRecord, judgement: Judgement, now: float) -> Command:
        pod = record.pod
        assert pod is not None
        detail = f"{judgement.detail}; " if judgement.detail else ""
        unsynced = judgement.reason is Reason.SETTINGS_UNSYNCED
        command = delete_pod(
            pod,
            f"{judgement.reason}: {detail}instance manager {record.key[1]} on node {record.node or '-'}",
            now,
            # Judged idle: the actuator deletes only while the IM still is (a failed pod goes anyway).
            idle=record.im if unsynced else None,
            node=self.view.nodes.get(record.pod_node),
        )
        command = self.issue(
            command, ("Pod", pod.metadata.namespace, pod.metadata.name), record.pod_rv(), pod.metadata.uid
        )
        self.slots.unwait(record.key)
        if unsynced:
            self._start_restart(record, now)
        return command

    def _settling_until(self, record: ImRecord, now: float) -> float | None:
        """When `record`'s settings restart may go, while it must settle (None: now)."""
        return settle_until(self._settings_changed_at, record.idle_since, self.config.settle, now)

    def _start_restart(self, record: ImRecord, now: float) -> None:
        pod_uid = record.pod.metadata.uid if record.pod is not None else ""
        deadline = now + self.config.restart_timeout
        self.slots.start(record.key, Restart(node=record.node, old_pod_uid=pod_uid, deadline=deadline))
        self.ask_again(deadline, _im_key(record))

    def _may_delete(self, record: ImRecord, now: float) -> bool:
        """No delete out on the IM's pod, and no refused one holding it back."""
        pod = record.pod
        return pod is not None and self.may_send(("Pod", pod.metadata.namespace, pod.metadata.name), now)

    def _why(self, record: ImRecord) -> tuple[str, str]:
        if not self._bootstrapped:
            return Reason.VIEW_INCOMPLETE, ""
        judgement = record.judgement
        if judgement is None:
            return Reason.VIEW_INCOMPLETE, "not judged yet"
        if record.delete.expectation is not None:
            return Reason.COMMAND_PENDING, record.delete.expectation.reason
        restart = self.slots.restarts.get(record.key)
        if restart is not None and not judgement.delete:
            return (
                Reason.RESTARTING,
                f"{judgement.reason}: {judgement.detail}" if judgement.detail else judgement.reason,
            )
        if judgement.delete:
            if self.expected.held(record.delete, self._pod_judged_rv(record), self.clock()):
                return Reason.RETRY_BACKOFF, f"{judgement.reason}: {judgement.detail}"
            until = (
                self._settling_until(record, self.clock())
                if judgement.reason is Reason.SETTINGS_UNSYNCED
                else None
            )
            if until is not None:
                return (
                    Reason.SETTLING,
                    f"settings changed moments ago; restart at {until:.1f} unless they change again;"
                    f" due: {judgement.detail}",
                )
            if self.slots.is_waiting(record.key):
                return (
                    Reason.CONCURRENCY_LIMIT,
                    f"{self.slots.why_full(record.node)}; due: {judgement.detail}",
                )
        return judgement.reason, judgement.detail


def _tracked(track: Track) -> bool:
    """A command is out on it, or a refusal may still hold it."""
    return track.expectation is not None or bool(track.hold_until)
