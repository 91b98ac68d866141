"""Events in, per-node figures and per-IM lines out: what `corral progress im-restart` draws.

An operator asks which instance managers wait for a restart, for which settings, on which busy
instances, and since when. The figures must never disagree with what im-restart decides, so this
model runs the service's own decider (`ImRestartDecider`: same view, same rules, same memoised
pod check) on the events, and reads its judgement of every IM; the commands it would send are
dropped. Per IM:

* **done**: its pod lags no setting (busy or not);
* **in flight**: a restart under way (pod terminating, missing, or not running yet);
* **waiting**: due now (idle with settings to sync, or a failed pod): im-restart deletes it;
* **blocked**, with the reason: `busy` (settings pending until its instances stop),
  `hugepage-capacity`, `settings-invalid`, `check-failed`.

"Since when" is the SettingSynced condition's `lastTransitionTime` when it says False (written at
the change by im-restart), else the first time this model saw the IM lag.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from corral_decision.progress import GroupFigures, Phase
from corral_im_restart.core import ImRestartDecider
from corral_im_restart.judge import SETTING_SYNCED, Judgement
from corral_im_restart.reasons import Reason
from corral_im_restart.view import ImKey, ImRecord
from corral_model.envelopes import ObjectEvent

_IN_FLIGHT = frozenset({Reason.POD_MISSING, Reason.POD_TERMINATING, Reason.NOT_RUNNING})
_WAITING = frozenset({Reason.SETTINGS_UNSYNCED, Reason.POD_FAILED})
NO_NODE = "-"


def phase_of(judgement: Judgement) -> tuple[Phase, str]:
    reason = judgement.reason
    if reason is Reason.SETTINGS_SYNCED or (reason is Reason.BUSY and not judgement.unsynced):
        return Phase.DONE, ""
    if reason in _IN_FLIGHT:
        return Phase.IN_FLIGHT, ""
    if reason in _WAITING:
        return Phase.WAITING, ""
    return Phase.BLOCKED, str(reason)


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ImProgress:
    """A `corral_decision.progress.Progress` over instance managers, plus `details()`: one line per
    IM that is not done."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.decider = ImRestartDecider(clock)
        self._since: dict[ImKey, str] = {}

    # --- input ------------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> None:
        """Fold one event in; raises `corral_decision.InvalidEvent` for one it cannot read."""
        self.decider.apply(event)

    def _judged(self) -> list[tuple[ImRecord, Judgement]]:
        self.decider.decide()  # judges what the events touched; its commands are not ours to send
        now = self._clock()
        judged = []
        for key in sorted(self.decider.view.records):
            record = self.decider.view.records[key]
            if record.im is None or record.judgement is None:
                continue
            judgement = record.judgement
            if judgement.unsynced:
                self._since.setdefault(key, self._condition_since(record) or _stamp(now))
            else:
                self._since.pop(key, None)
            judged.append((record, judgement))
        return judged

    @staticmethod
    def _condition_since(record: ImRecord) -> str:
        assert record.im is not None
        for held in record.im.status.conditions:
            if held.type == SETTING_SYNCED and held.status == "False":
                return held.last_transition_time or ""
        return ""

    # --- output -----------------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        return self.decider.ready

    @property
    def limit(self) -> int:
        return 0  # the service's restart limits are its configuration, not in the events

    @property
    def target(self) -> str:
        return ""

    def heading(self) -> str:
        return "im-restart: instance managers whose pods lag the danger-zone settings"

    def groups(self) -> list[GroupFigures]:
        rows: dict[str, GroupFigures] = {}
        for record, judgement in self._judged():
            node = record.node or NO_NODE
            row = rows.get(node)
            if row is None:
                row = rows[node] = GroupFigures(node)
            phase, reason = phase_of(judgement)
            row.add(phase, reason, 1)
        return [rows[n] for n in sorted(rows)]

    def total(self) -> GroupFigures:
        return GroupFigures.sum(self.groups())

    def finished(self, target: str = "") -> bool:
        """Nothing in flight or due; IMs held by a reason (busy…) are reported, not waited for."""
        if not self.complete:
            return False
        total = self.total()
        return not (total.in_flight or total.waiting)

    def details(self) -> list[str]:
        """`<IM>  <node>  <phase>[: reason]  busy: …  unsynced: …  since <time>` per IM not done."""
        lines = []
        for record, judgement in self._judged():
            phase, reason = phase_of(judgement)
            if phase is Phase.DONE:
                continue
            state = f"{phase}: {reason}" if reason else str(phase)
            parts = [record.key[1], record.node or NO_NODE, state]
            if judgement.busy:
                parts.append("busy: " + ", ".join(judgement.busy))
            if judgement.unsynced:
                parts.append("unsynced: " + ", ".join(judgement.unsynced))
                parts.append(f"since {self._since.get(record.key, '-')}")
            elif judgement.detail and judgement.reason is not Reason.BUSY:
                parts.append(judgement.detail)
            lines.append("  ".join(parts))
        return lines
