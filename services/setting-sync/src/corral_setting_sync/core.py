"""The setting-sync decider: Longhorn's setting controller for danger-zone settings (spec §3.3) as
a `corral_decision.Decider`. Pure: no I/O, injected clock.

* `apply(event)` folds one event into the view and marks what it touched: a component (a managed
  workload or pod, components.py) is re-judged against the settings it carries, a volume moves in
  or out of the attachment index (volumes.py; O(1), the precondition is "the index is empty"), a
  setting change re-judges every component for that one setting (rare);
* `decide()` re-judges only the marked settings: components lagging a setting whose precondition
  holds get one command each (a template patch, or a pod delete), and every Setting whose
  `status.applied` disagrees with the verdict gets it written;
* `applied` is true exactly when no component lags the value (nothing needed changing, or every
  change is visible in the view), so it turns true on the event that shows the last change, and
  never while a component still carries the old value;
* a command is an expectation until the view shows a fresher object (or it is refused, or
  `command_ttl` passes); a refused one is not sent again until the object changes or
  `retry_backoff` passes.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgspec

from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import DANGER_ZONE, ApplyGroup, SettingName, default_value, definition
from corral_dangerzone.validation import normalize_value
from corral_decision.base import DeciderBase, TargetKey, key_of
from corral_decision.decider import Clock, Explanation, InvalidEvent
from corral_decision.pod_delete import node_as_read
from corral_decision.settle import settle_until
from corral_decision.timing import Timing
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent
from corral_setting_sync.commands import (
    SERVICE,
    delete_instance_manager,
    delete_pod,
    patch_template,
    set_applied,
)
from corral_setting_sync.components import Component, Role, lagging, role_of, same_facts, template_changes
from corral_setting_sync.events import EVENT_REASON, event_name, pending_event
from corral_setting_sync.im_node import im_node, not_ready
from corral_setting_sync.per_engine import ENGINES, TOGGLE, EngineIndex
from corral_setting_sync.reasons import Reason
from corral_setting_sync.volumes import AttachmentIndex, name_some
from corral_setting_sync.wanted import APPLIED_HERE, Wanted, check, defaults, with_value

READS: dict[str, type[Any]] = {
    "setting": lh.Setting,
    "volume": lh.Volume,
    "instancemanager": lh.InstanceManager,
    "daemonset": lh.DaemonSet,
    "deployment": lh.Deployment,
    "pod": lh.Pod,
    "node": lh.Node,
    "kubenode": lh.KubeNode,
}
_DANGER = frozenset(n.value for n in DANGER_ZONE)
_BY_GROUP = {
    group: tuple(n.value for n, g in APPLIED_HERE.items() if g is group)
    for group in (ApplyGroup.ALL_VOLUMES_DETACHED, ApplyGroup.RWX_VOLUMES_DETACHED)
}
_COMPONENT_KINDS = frozenset({"pod", "daemonset", "deployment"})
_SETTLED_GROUPS = frozenset({ApplyGroup.ALL_VOLUMES_DETACHED, ApplyGroup.RWX_VOLUMES_DETACHED})
"""The groups whose pods are restarted (and templates rolled) only while volumes are detached."""
_PER_ENGINE = (*TOGGLE.values(), SettingName.GUARANTEED_INSTANCE_MANAGER_CPU)
"""Group D: judged per instance manager (per_engine.py)."""
_FORMULA = frozenset({*_PER_ENGINE, SettingName.DATA_ENGINE_NUMBER_OF_CPU_CORES})
"""The settings group D's judgement reads (the v2 CPU request counts whole cores)."""


class DeciderConfig(msgspec.Struct, frozen=True, kw_only=True):
    timing: Timing = Timing()
    """The kit's expectation TTLs and retry backoff."""
    event_interval: float = 5.0
    """At most one pending Event per setting this often: a blocker list that changes on every
    attach and detach is reported as it stands every `event_interval`, not on every event."""
    settle: float = 0.0
    """After a group A/B setting changes while its precondition already held, wait this long since
    the latest change before deleting a pod or patching a template for it, so settings written in
    quick succession cost one restart, not one each (corral_decision.settle). Once the precondition
    comes to hold after the change (the last volume detached), nothing is held."""


class Verdict(msgspec.Struct, frozen=True):
    reason: Reason
    applied: bool | None
    """What `status.applied` must say; None: not corral's to write."""


class ComponentRecord:
    """One managed workload or pod and the settings (applied here) it does not carry yet."""

    __slots__ = ("key", "lagging", "obj", "role", "rv", "token")

    def __init__(self, key: TargetKey, token: str, role: Role, obj: Component, rv: int) -> None:
        self.key, self.token, self.role, self.obj, self.rv = key, token, role, obj, rv
        self.lagging: frozenset[SettingName] = frozenset()


class SettingSyncDecider(DeciderBase):
    """The setting-sync rules as a `corral_decision.Decider`."""

    def __init__(self, clock: Clock, config: DeciderConfig | None = None) -> None:
        self.config = config or DeciderConfig()
        super().__init__(clock, reads=READS, timing=self.config.timing, service=SERVICE)
        self.settings: dict[str, lh.Setting] = {}
        self.raw: dict[str, str] = {n.value: row.default for n, row in DANGER_ZONE.items()}
        self.invalid: dict[str, str] = {}
        """Danger-zone setting → Longhorn's validation message for its stored value."""
        self.wanted: Wanted = defaults()
        self.valid_values: dict[str, str] = {}
        """Danger-zone setting → its last valid value, normalised (group D reads these)."""
        self.engines = EngineIndex(DangerZoneSettings.defaults())
        self.volumes = AttachmentIndex()
        self.components: dict[TargetKey, ComponentRecord] = {}
        self.lagging: dict[SettingName, dict[TargetKey, None]] = {n: {} for n in APPLIED_HERE}
        """Per setting, the components not carrying it (ordered set)."""
        self._todo: dict[SettingName, set[TargetKey]] = {n: set() for n in APPLIED_HERE}
        """Components to consider for a command at the next decision, per setting."""
        self._dirty: set[str] = set()
        self.verdicts: dict[str, Verdict] = {}
        self._bootstrapped = False
        self._reported: dict[str, tuple[Reason, str]] = {}
        """Per setting, the blocker its last pending Event named (absent while nothing blocks it)."""
        self._reported_at: dict[str, float] = {}
        self._occurrences: dict[str, int] = {}
        """Event name → how many times this decider reported it (the Event's `count`)."""
        self._report_due: set[str] = set()
        self._changed_at: float | None = None
        """When a group A/B setting's value last changed (after start-up)."""
        self._free_since: dict[ApplyGroup, float] = {}
        """Since when each volume precondition has held, from when it last came to hold."""

    # --- input ------------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> None:
        struct = READS.get(event.kind)
        if struct is None:
            raise InvalidEvent(f"setting-sync does not read {event.kind!r}")
        deleted = event.type is EventType.DELETED
        if event.type is not EventType.RESYNCED and not deleted and not isinstance(event.object, struct):
            raise InvalidEvent(f"{event.kind} {event.namespace}/{event.name} carries no {struct.__name__}")
        key = self.observe(event)
        if key is None:  # a RESYNCED marker
            if self.ready and not self._bootstrapped:
                self._bootstrapped = True
                self.reconsider_all()
            return
        obj = None if deleted else event.object
        kind = event.kind
        if kind == "volume":
            self._apply_volume(event.name, obj)
        elif kind in _COMPONENT_KINDS:
            self._apply_component(key, kind, obj)
        elif kind == "setting":
            self._apply_setting(key, event.name, obj)
        elif kind == "instancemanager":
            self.settle_if_fresher(key, deleted)
            moves = self.engines.moves
            self._per_engine_moved(self.engines.apply_im(event.name, obj), moves)
        elif kind == "node":
            self._per_engine_moved(self.engines.apply_node(event.name, obj))
            self._node_moved(event.namespace, event.name)
        elif kind == "kubenode":
            self._per_engine_moved(self.engines.apply_kube_node(event.name, obj))
        if kind == "pod" and (obj is None or role_of(kind, obj) is Role.INSTANCE_MANAGER):
            self._per_engine_moved(self.engines.apply_pod(event.name, obj))

    def _per_engine_moved(self, changed: set[SettingName], moves: int | None = None) -> None:
        self._dirty.update(n.value for n in changed)
        if moves is not None and moves != self.engines.moves:
            self._blockers_moved()

    def _blockers_moved(self) -> None:
        """The volumes or instance managers that block settings changed: each setting reported
        blocked is reported again as it then stands, at most every `event_interval` (O(reported))."""
        for name in self._reported:
            self._schedule_report(name, self.clock())

    def _schedule_report(self, name: str, now: float) -> None:
        if name in self._report_due:
            return
        self._report_due.add(name)
        due = max(now, self._reported_at.get(name, now) + self.config.event_interval)
        self.ask_again(due, ("SettingEvent", "", name))

    def _apply_volume(self, name: str, volume: lh.Volume | None) -> None:
        moves = self.volumes.moves
        flipped_a, flipped_b = self.volumes.apply(name, volume)
        if moves != self.volumes.moves:
            self._blockers_moved()
        if flipped_a:
            if self.volumes.all_detached:
                self._free_since[ApplyGroup.ALL_VOLUMES_DETACHED] = self.clock()
            self._precondition_moved(ApplyGroup.ALL_VOLUMES_DETACHED)
        if flipped_b:
            if self.volumes.rwx_detached:
                self._free_since[ApplyGroup.RWX_VOLUMES_DETACHED] = self.clock()
            self._precondition_moved(ApplyGroup.RWX_VOLUMES_DETACHED)

    def _precondition_moved(self, group: ApplyGroup) -> None:
        for name in _BY_GROUP[group]:
            setting = SettingName(name)
            if self.lagging[setting]:
                self._dirty.add(name)
                self._todo[setting] = set(self.lagging[setting])

    def _apply_setting(self, key: TargetKey, name: str, setting: lh.Setting | None) -> None:
        if setting is None:
            self.settings.pop(name, None)
        else:
            self.settings[name] = setting
        self.settle_if_fresher(key, setting is None)
        self._dirty.add(name)
        if name not in _DANGER:
            return
        raw = setting.value if setting is not None else default_value(name)
        if raw == self.raw[name]:
            return
        self.raw[name] = raw
        message = check(SettingName(name), raw)
        if message is None:
            self.invalid.pop(name, None)
            self.valid_values[name] = normalize_value(name, raw)
        else:
            self.invalid[name] = message
        if SettingName(name) in APPLIED_HERE:
            if self._bootstrapped and APPLIED_HERE[SettingName(name)] in _SETTLED_GROUPS:
                self._changed_at = self.clock()
            self._revalue(SettingName(name), raw, message is None)
        if SettingName(name) in _FORMULA and message is None:
            settings = DangerZoneSettings.from_values(self.valid_values)
            self._per_engine_moved(self.engines.revalue(settings) | {SettingName(name)})

    def _revalue(self, name: SettingName, raw: str, valid: bool) -> None:
        """Judge every component again for `name` alone (a value change: rare, O(components))."""
        if valid:
            self.wanted = with_value(self.wanted, name, raw)
        index = self.lagging[name]
        index.clear()
        for record in self.components.values():
            behind = record.lagging - {name}
            if valid and name in lagging(record.role, record.obj, self.wanted, (name,)):
                behind |= {name}
                index[record.key] = None
            record.lagging = behind
        self._todo[name] = set(index)

    def _valid(self) -> list[SettingName]:
        return [n for n in APPLIED_HERE if n.value not in self.invalid]

    def _apply_component(self, key: TargetKey, kind: str, obj: Component | None) -> None:
        record = self.components.get(key)
        role = role_of(kind, obj) if obj is not None else None
        rv = self.versions.get(key, 0)
        if role is None or obj is None:
            if record is not None:
                del self.components[key]
                self._set_lagging(record, frozenset())
            return
        if record is None:
            record = self.components[key] = ComponentRecord(key, kind, role, obj, rv)
            self._set_lagging(record, lagging(role, obj, self.wanted, self._valid()))
        else:
            old, old_role = record.obj, record.role
            record.obj, record.rv, record.role = obj, rv, role
            if role is not old_role or not same_facts(old, obj):
                self._set_lagging(record, lagging(role, obj, self.wanted, self._valid()))
        track = self.track_at(key)
        if self.settle_if_fresher(key) or (track is not None and self.clock() < track.hold_until):
            self._look_again(record)  # freed, or a refusal's hold may have ended

    def _set_lagging(self, record: ComponentRecord, behind: frozenset[SettingName]) -> None:
        before = record.lagging
        if before == behind:
            return
        record.lagging = behind
        for name in before - behind:
            del self.lagging[name][record.key]
            self._dirty.add(name.value)
        for name in behind - before:
            self.lagging[name][record.key] = None
            self._todo[name].add(record.key)
            self._dirty.add(name.value)

    def _node_moved(self, namespace: str, node: str) -> None:
        """The instance-manager pods on `node` are judged again (im_node.py): by their instance
        manager's node, or their own (a few per node)."""
        engines = self.engines
        on_node = {n for n, pod in engines.pods.items() if pod.spec.node_name == node}
        for name in sorted(on_node | engines.on_node.get(node, set())):
            record = self.components.get(("Pod", namespace, name))
            if record is not None:
                self._look_again(record)

    def judged_version(self, key: TargetKey) -> int | None:
        """An instance-manager pod's delete is judged on its node too (im_node.py): a refusal
        holds until the pod or the node changes."""
        own = self.version_at(key)
        record = self.components.get(key)
        if record is None or not isinstance(record.obj, lh.Pod) or record.role is not Role.INSTANCE_MANAGER:
            return own
        node = im_node(self.engines, record.obj)
        node_rv = self.versions.get(("Node", node.metadata.namespace, node.metadata.name)) if node else None
        return max((v for v in (own, node_rv) if v is not None), default=None)

    def _look_again(self, record: ComponentRecord) -> None:
        for name in record.lagging:
            self._todo[name].add(record.key)
            self._dirty.add(name.value)

    def may_adopt(self, command: Command) -> bool:
        """Another replica's command counts while it can still apply on this view."""
        key = key_of(command.target)
        version = self.versions.get(key)
        if version is None:
            return False
        tests = {p.path: p.value for p in command.preconditions}
        if "/metadata/resourceVersion" in tests:
            return bool(tests["/metadata/resourceVersion"] == str(version))
        setting = self.settings.get(command.target.name) if command.target.kind == "Setting" else None
        return setting is not None and tests.get("/value") == setting.value

    # --- output -----------------------------------------------------------------------------------

    def reconcile(self, now: float) -> list[Command]:
        if not self._bootstrapped:
            return []
        commands: list[Command] = []
        if not self._dirty:
            return commands
        dirty = sorted(self._dirty)
        self._dirty.clear()
        keys: set[TargetKey] = set()
        for name in dirty:
            setting = _applied_here(name)
            if setting is not None and self._todo[setting]:
                if self._actionable(setting):
                    keys |= self._todo[setting]
                self._todo[setting] = set()
        components = self.components
        for key in sorted(keys):
            record = components.get(key)
            if record is not None:
                self._act(record, now, commands)
        for name in dirty:
            if name in _PER_ENGINE_NAMES and name not in self.invalid:
                self._act_per_engine(SettingName(name), now, commands)
        for name in dirty:
            verdict = self.verdicts[name] = self._verdict(name)
            self._write_status(name, verdict, now, commands)
            self._report(name, verdict, now, commands)
        return commands

    def reconsider_all(self) -> None:
        self._dirty.update(self.settings)
        self._dirty.update(n.value for n in APPLIED_HERE)
        for name, index in self.lagging.items():
            self._todo[name] = set(index)

    def explain(self, key: str | None = None) -> list[Explanation]:
        """Per Setting in view (or the one `key` names, `Setting/ns/name`): applied, or what blocks it."""
        names = sorted(self.settings)
        if key is not None:
            kind, _, rest = key.partition("/")
            namespace, _, name = rest.partition("/")
            names = [
                n
                for n in names
                if kind == "Setting" and self.settings[n].metadata.namespace == namespace and n == name
            ]
        out = []
        for name in names:
            setting = self.settings[name]
            if not self._bootstrapped:
                reason, detail = Reason.VIEW_INCOMPLETE, ""
            else:
                reason = self._verdict(name).reason
                detail = self._detail(name, reason)
            out.append(
                Explanation(
                    kind="Setting",
                    namespace=setting.metadata.namespace,
                    name=name,
                    reason=reason,
                    group=_group_of(name),
                    detail=detail,
                )
            )
        return out

    # --- figures for metrics and tests ----------------------------------------------------------------

    def pending_by_setting(self) -> dict[str, int]:
        """Danger-zone Setting in view → 1 while its value is not applied (0 once it is)."""
        return {
            name: int(self._verdict(name).reason.pending) for name in sorted(self.settings) if name in _DANGER
        }

    def lagging_components(self, name: SettingName) -> set[str]:
        """`Kind/name` of every component still on `name`'s old value (O(those components))."""
        if name is SettingName.GUARANTEED_INSTANCE_MANAGER_CPU:
            return {f"Pod/{n}" for e in ENGINES for n in self.engines.cpu_lagging[e]}
        if name in TOGGLE.values():
            return {f"InstanceManager/{n}" for n in self.engines.disabled[_engine_of(name)]}
        return {f"{k[0]}/{k[2]}" for k in self.lagging.get(name, {})}

    # --- internals ----------------------------------------------------------------------------------

    def _actionable(self, name: SettingName) -> bool:
        if name.value in self.invalid:
            return False
        group = APPLIED_HERE[name]
        if group is ApplyGroup.ALL_VOLUMES_DETACHED:
            return self.volumes.all_detached
        if group is ApplyGroup.RWX_VOLUMES_DETACHED:
            return self.volumes.rwx_detached
        return True

    def _act(self, record: ComponentRecord, now: float, commands: list[Command]) -> None:
        key = record.key
        if not self.may_send(key, now):
            return
        names = [n for n in record.lagging if self._actionable(n)]
        if not names:
            return
        until = self._settling_until(names, now)
        if until is not None:
            self.ask_again(until, key)
            return
        obj = record.obj
        if isinstance(obj, lh.Pod):
            if obj.metadata.deletion_timestamp:
                return  # already going; it counts as lagging until it is gone
            node = im_node(self.engines, obj) if record.role is Role.INSTANCE_MANAGER else None
            if not_ready(node):
                return  # im_node.py: judged again when the node changes (`_node_moved`)
            command = delete_pod(obj, names, now, (node_as_read(node),) if node is not None else ())
        else:
            changes = template_changes(obj, names, self.wanted)
            command = patch_template(key[0], obj, changes, names, now)
        commands.append(self.issue(command, key, record.rv))

    def _settling_until(self, names: list[SettingName], now: float) -> float | None:
        """While a burst of group A/B changes may still be under way on a precondition that held
        before it: when to act (None: now)."""
        groups = {APPLIED_HERE[n] for n in names}
        if not groups <= _SETTLED_GROUPS:
            return None
        free = [self._free_since.get(g) for g in groups]
        free_since = None if None in free else min(f for f in free if f is not None)
        return settle_until(self._changed_at, free_since, self.config.settle, now)

    def _act_per_engine(self, name: SettingName, now: float, commands: list[Command]) -> None:
        """Group D: delete a disabled engine's IM CRs, or IM pods whose CPU request lags, once no
        instance manager of that engine runs engine instances (v1 first: a blocked v1 stops v2)."""
        engines = self.engines
        if name is SettingName.GUARANTEED_INSTANCE_MANAGER_CPU:
            for engine in ENGINES:
                if not engines.cpu_lagging[engine]:
                    continue
                if engines.engine_busy(engine):
                    return
                for pod_name in sorted(engines.cpu_lagging[engine]):
                    pod = engines.pods[pod_name]
                    key = ("Pod", pod.metadata.namespace, pod_name)
                    if not pod.metadata.deletion_timestamp and self.may_send(key, now):
                        commands.append(self.issue(delete_pod(pod, (name,), now), key))
            return
        engine = _engine_of(name)
        if engines.engine_busy(engine):
            return
        for im_name in sorted(engines.disabled[engine]):
            im = engines.ims[im_name]
            key = ("InstanceManager", im.metadata.namespace, im_name)
            if self.may_send(key, now):
                commands.append(self.issue(delete_instance_manager(im, engine, name, now), key))

    def _report(self, name: str, verdict: Verdict, now: float, commands: list[Command]) -> None:
        """A Warning Event on the Setting naming what blocks it, when that changed (at most every
        `event_interval`); the same blocker again later is the same Event, counted once more."""
        setting = self.settings.get(name)
        if setting is None or verdict.reason not in EVENT_REASON:
            self._reported.pop(name, None)
            return
        blocker = (verdict.reason, self._detail(name, verdict.reason))
        if self._reported.get(name) == blocker:
            return
        last = self._reported_at.get(name)
        if last is not None and now < last + self.config.event_interval:
            self._schedule_report(name, now)
            return
        self._reported[name], self._reported_at[name] = blocker, now
        event = event_name(setting, EVENT_REASON[blocker[0]], blocker[1])
        count = self._occurrences[event] = self._occurrences.get(event, 0) + 1
        commands.append(pending_event(setting, blocker[0], blocker[1], count, now))

    def _write_status(self, name: str, verdict: Verdict, now: float, commands: list[Command]) -> None:
        setting = self.settings.get(name)
        if verdict.applied is None or setting is None or setting.status.applied == verdict.applied:
            return
        key = ("Setting", setting.metadata.namespace, name)
        if self.may_send(key, now):
            commands.append(self.issue(set_applied(setting, verdict.applied, verdict.reason, now), key))

    def look_again(self, key: TargetKey) -> None:
        """Look at `key` again at the next decision."""
        record = self.components.get(key)
        if record is not None:
            self._look_again(record)
        elif key[0] == "Setting":
            self._dirty.add(key[2])
        elif key[0] == "SettingEvent":
            self._report_due.discard(key[2])
            self._dirty.add(key[2])
        if key[0] in ("InstanceManager", "Pod"):
            self._dirty.update(_PER_ENGINE_NAMES)

    def _verdict(self, name: str) -> Verdict:
        if name not in _DANGER:
            return Verdict(Reason.NOT_DANGER_ZONE, True)
        if name in self.invalid:
            return Verdict(Reason.INVALID_VALUE, False)
        setting = SettingName(name)
        if setting in _PER_ENGINE:
            return self._per_engine_verdict(setting)
        group = APPLIED_HERE.get(setting)
        if group is None:
            if definition(name).group is ApplyGroup.CONSUMED_OTHER:
                return Verdict(Reason.CONSUMED_ELSEWHERE, True)
            return Verdict(Reason.NOT_HANDLED, None)
        if not self.lagging[setting]:
            return Verdict(Reason.APPLIED, True)
        if group is ApplyGroup.ALL_VOLUMES_DETACHED and not self.volumes.all_detached:
            return Verdict(Reason.ATTACHED_VOLUMES, False)
        if group is ApplyGroup.RWX_VOLUMES_DETACHED and not self.volumes.rwx_detached:
            return Verdict(Reason.RWX_VOLUMES_ATTACHED, False)
        if self._held_by_nodes(setting):
            return Verdict(Reason.NODE_NOT_READY, False)
        return Verdict(Reason.APPLYING, False)

    def _held_by_nodes(self, name: SettingName) -> set[str]:
        """The nodes that every component still lagging `name` waits for: each one an instance
        manager's pod whose Longhorn node is not Ready (im_node.py). Empty as soon as one could be
        acted on (the first such component ends the walk: O(1) while applying)."""
        nodes: set[str] = set()
        for key in self.lagging.get(name, {}):
            record = self.components.get(key)
            pod = record.obj if record is not None and record.role is Role.INSTANCE_MANAGER else None
            node = im_node(self.engines, pod) if isinstance(pod, lh.Pod) else None
            if node is None or not not_ready(node):
                return set()
            nodes.add(node.metadata.name)
        return nodes

    def _per_engine_verdict(self, name: SettingName) -> Verdict:
        engines = self.engines
        if name is SettingName.GUARANTEED_INSTANCE_MANAGER_CPU:
            lagging_engines = [e for e in ENGINES if engines.cpu_lagging[e]]
            if not lagging_engines:
                return Verdict(Reason.APPLIED, True)
            if self._cpu_blocker() is not None:
                return Verdict(Reason.ENGINE_INSTANCES, False)
            return Verdict(Reason.APPLYING, False)
        engine = _engine_of(name)
        if not engines.disabled[engine]:
            return Verdict(Reason.APPLIED, True)
        if engines.engine_busy(engine):
            return Verdict(Reason.ENGINE_INSTANCES, False)
        return Verdict(Reason.APPLYING, False)

    def _cpu_blocker(self) -> str | None:
        """The data engine whose running instances hold the CPU change back (v1 stops v2)."""
        for engine in ENGINES:
            if self.engines.cpu_lagging[engine] and self.engines.engine_busy(engine):
                return engine
        return None

    def _detail(self, name: str, reason: Reason) -> str:
        if reason is Reason.INVALID_VALUE:
            return self.invalid[name]
        if reason is Reason.ATTACHED_VOLUMES:
            return name_some(self.volumes.attached, "attached volume", "attached volumes")
        if reason is Reason.RWX_VOLUMES_ATTACHED:
            return name_some(self.volumes.rwx_attached, "attached RWX volume", "attached RWX volumes")
        if reason is Reason.ENGINE_INSTANCES:
            setting = SettingName(name)
            engine = self._cpu_blocker() if setting not in TOGGLE.values() else _engine_of(setting)
            busy = self.engines.busy[engine or "v1"]
            return f"{engine} " + name_some(
                busy, "instance manager with engine instances", "instance managers with engine instances"
            )
        if reason is Reason.NODE_NOT_READY:
            return waiting_for_nodes(self._held_by_nodes(SettingName(name)))
        if reason is Reason.APPLYING:
            names = self.lagging_components(SettingName(name))
            return name_some(names, "component on the old value", "components on the old value")
        if reason is Reason.NOT_HANDLED:
            return f"group {_group_of(name)}: left to Longhorn"
        return ""


_PER_ENGINE_NAMES = frozenset(n.value for n in _PER_ENGINE)


def waiting_for_nodes(nodes: set[str], limit: int = 5) -> str:
    """`waiting for node node-1 to be Ready`, or `waiting for 3 nodes: a, b, c to be Ready`."""
    shown = ", ".join(heapq.nsmallest(limit, nodes)) + (", …" if len(nodes) > limit else "")
    which = f"node {shown}" if len(nodes) == 1 else f"{len(nodes)} nodes: {shown}"
    return f"waiting for {which} to be Ready"


def _engine_of(toggle: SettingName) -> str:
    return "v1" if toggle is SettingName.V1_DATA_ENGINE else "v2"


def _applied_here(name: str) -> SettingName | None:
    try:
        setting = SettingName(name)
    except ValueError:
        return None
    return setting if setting in APPLIED_HERE else None


def _group_of(name: str) -> str:
    return str(definition(name).group) if name in _DANGER else ""
