"""Events in, per-setting figures out: which danger-zone settings are pending, what blocks each, and
which components are still on the old value (`corral progress setting-sync`, the `make run` demo).

The figures must never disagree with what setting-sync decides, so this model *is* the service's
decider, fed the same events and never asked to decide: its verdicts, its blockers and its index of
lagging components are read as they stand. One row per pending setting:

* **in flight**: components on the old value while nothing blocks (setting-sync is changing them);
* **done**: components already carrying the value (a setting's row stays once it is applied);
* **blocked**: components on the old value, under what holds them back ("attached-volumes", …);
* `details()` names the blocker ("2 attached volumes: pvc-a, pvc-b") and the components left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral_dangerzone.table import DANGER_ZONE, SettingName
from corral_decision.progress import GroupFigures, Phase
from corral_model.envelopes import ObjectEvent
from corral_setting_sync.components import SETTINGS_OF
from corral_setting_sync.core import SettingSyncDecider
from corral_setting_sync.per_engine import ENGINES, TOGGLE
from corral_setting_sync.reasons import Reason
from corral_setting_sync.volumes import name_some

_DANGER = frozenset(n.value for n in DANGER_ZONE)


class SettingProgress:
    """A `corral_decision.progress.Progress` over setting-sync's own decider."""

    group_title = "SETTING"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.decider = SettingSyncDecider(clock)
        self._seen: dict[str, None] = {}
        """Settings shown pending since following began: their rows stay (done) once applied."""

    def apply(self, event: ObjectEvent[Any]) -> None:
        self.decider.apply(event)

    @property
    def complete(self) -> bool:
        return self.decider.ready

    @property
    def limit(self) -> int:
        return 0

    @property
    def target(self) -> str:
        return ""

    def pending(self) -> list[str]:
        """Danger-zone settings in view whose value is not applied, by name."""
        return [name for name, value in self.decider.pending_by_setting().items() if value]

    def heading(self) -> str:
        pending = self.pending()
        return f"setting-sync: {len(pending)} danger-zone setting{'' if len(pending) == 1 else 's'} pending"

    def _verdict(self, name: str) -> tuple[Reason, str]:
        [why] = self.decider.explain(f"Setting/{self._namespace(name)}/{name}")
        return Reason(why.reason), why.detail

    def _namespace(self, name: str) -> str:
        return self.decider.settings[name].metadata.namespace

    def _carriers(self, name: SettingName) -> int:
        """Components that carry `name` at all (done + on the old value)."""
        if name is SettingName.GUARANTEED_INSTANCE_MANAGER_CPU:
            return len(self.decider.engines.pods)
        if name in TOGGLE.values():
            return sum(len(self.decider.engines.disabled[e]) for e in ENGINES)
        return sum(1 for record in self.decider.components.values() if name in SETTINGS_OF[record.role])

    def row(self, name: str) -> GroupFigures:
        reason, _ = self._verdict(name)
        setting = SettingName(name)
        old = len(self.decider.lagging_components(setting))
        row = GroupFigures(name)
        row.done = max(0, self._carriers(setting) - old)
        if reason is Reason.INVALID_VALUE:
            row.add(Phase.BLOCKED, str(reason), max(old, 1))
        elif reason is Reason.APPLYING:
            row.add(Phase.IN_FLIGHT, "", old)
        elif old:
            row.add(Phase.BLOCKED, str(reason), old)
        return row

    def groups(self) -> list[GroupFigures]:
        """A row per setting pending now or since following began (so it ends as done)."""
        self._seen.update(dict.fromkeys(self.pending()))
        return [self.row(name) for name in self._seen if name in self.decider.settings]

    def total(self) -> GroupFigures:
        return GroupFigures.sum(self.groups())

    def details(self) -> list[str]:
        """Per pending setting: what blocks it and the components still on the old value."""
        lines = []
        for name in self.pending():
            reason, detail = self._verdict(name)
            old = self.decider.lagging_components(SettingName(name))
            why = f"{reason}: {detail}" if detail and reason is not Reason.APPLYING else str(reason)
            left = name_some(old, "component on the old value", "components on the old value") if old else ""
            lines.append(f"{name}: {why}" + (f"; {left}" if left else ""))
        return lines

    def finished(self, target: str = "") -> bool:
        """Every danger-zone setting in view is applied (or not corral's to apply)."""
        return self.complete and not self.pending()
