"""The blast-radius guard: a wave that fails on too many volumes pauses cluster-wide.

Longhorn has no brake for a bad engine image: set as default, it is rolled out to every volume,
`limit` per owner node at a time, and a failed upgrade is retried for ever (issue 30). corral counts
the volumes of the wave (those it saw in flight to the default image) that went wrong on the new
image: named stuck (stuck.py), or degraded or faulted while in flight or after they upgraded. When
that count reaches `max_failed`, or their share of the wave reaches `max_failed_share` (once the
wave has `SHARE_SAMPLE` volumes, below which a share is noise and the count does the job), the wave
pauses: no new upgrade starts anywhere, the ones in flight finish (or stay stuck, named).

The pause is written where an operator looks and where it survives a restart or a new leader: an
annotation on the default EngineImage, `engine-upgrade.corral.io/wave-paused: "<id>: <reason>"`
(an annotation rather than a status condition: the EngineImage's status belongs to Longhorn's
controller, which rewrites its conditions), and a Warning Event on the EngineImage. The operator
resumes with one action: `engine-upgrade.corral.io/wave-resumed: "<id>"` on the same EngineImage
(`corral engine-upgrade resume` writes it). The failures seen so far are then acknowledged: the
wave pauses again only when as many new ones come. A new default image is a new wave; an image whose
EngineImage still carries a pause nobody resumed starts paused.

The annotation is what makes the pause last and what the operator's resume answers, so the decider
keeps its command as an expectation (core.py): until the view shows the annotation it is sent
again (`mark`) once the command is refused and its backoff passes, or is presumed lost at its TTL.
"""

from __future__ import annotations

import msgspec

from corral_decision.events import EventType, event_command
from corral_engine_upgrade.records import WAVE_PAUSED, ImageRecord, VolumeRecord
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command

PAUSED_EVENT = "EngineUpgradeWavePaused"
PAUSED_PATH = "/metadata/annotations/" + WAVE_PAUSED.replace("/", "~1")

SHARE_SAMPLE = 10
"""Volumes a wave must have started before the share applies."""

FAILING = frozenset({"degraded", "faulted"})
"""Robustness of a volume that went wrong on the new image (`unknown` is a detached volume's)."""


class WaveGuardConfig(msgspec.Struct, frozen=True, kw_only=True):
    max_failed: int = 3
    """Pause once this many volumes of the wave failed or got stuck (0: never by count)."""
    max_failed_share: float = 0.1
    """Or once this share of the wave's volumes did (1.0 or more: never by share)."""


WAVE_GUARD_OFF = WaveGuardConfig(max_failed=0, max_failed_share=1.0)
"""Never pause (properties about the limit and liveness, where faults are the point)."""


def pause_id(ei: ImageRecord | None) -> str:
    """The id of the pause `ei` carries that no operator resumed ("" when none)."""
    if ei is None or not ei.paused:
        return ""
    id_ = ei.paused.split(":", 1)[0]
    return "" if id_ == ei.resumed else id_


class WaveGuard:
    """One wave's failures and its pause. Pure: the decider feeds it and sends what it makes."""

    def __init__(self, service: str, config: WaveGuardConfig | None = None) -> None:
        self.service = service
        self.config = config or WaveGuardConfig()
        self.image = ""  # the wave's image: the default image it was counted for
        self.members: set[VolumeRecord] = set()  # volumes seen in flight to `image`
        self.failed: dict[VolumeRecord, str] = {}  # members that went wrong → how
        self.acknowledged = 0  # failures the operator resumed past
        self.started_at_resume = 0
        self.pending = ""  # a pause this guard decided, until resumed (the view may lag)
        self.reason = ""
        self.seen_resume = ""  # the last resume read on the EngineImage
        self.outbox: list[Command] = []

    def new_wave(self, image: str) -> None:
        self.image = image
        self.members.clear()
        self.failed.clear()
        self.acknowledged = self.started_at_resume = 0
        self.pending = self.reason = ""

    def joined(self, volume: VolumeRecord) -> None:
        """`volume` is in flight to the wave's image."""
        if volume.spec_image == self.image and self.image:
            self.members.add(volume)

    def forget(self, volume: VolumeRecord) -> None:
        self.members.discard(volume)

    def paused(self, ei: ImageRecord | None) -> str:
        """Why the wave is paused ("" when it is not): by this guard, or by the EngineImage's mark."""
        if self.pending:
            return self.reason
        return ei.paused if ei is not None and pause_id(ei) else ""

    def resumed(self, ei: ImageRecord | None) -> bool:
        """The EngineImage shows a new resume from the operator, of this guard's pause or of one
        it found there: True once. The failures so far are acknowledged."""
        if ei is None or not ei.resumed or ei.resumed == self.seen_resume:
            return False
        self.seen_resume = ei.resumed
        if self.pending and ei.resumed != self.pending:
            return False  # an older pause's resume: this one still holds
        self.acknowledged = len(self.failed)
        self.started_at_resume = len(self.members)
        self.pending = self.reason = ""
        return True

    def failure(self, volume: VolumeRecord, how: str, ei: ImageRecord | None, now: float) -> bool:
        """A member went wrong: True when that pauses the wave (now); the decider then sends the
        pause's `mark`."""
        if volume not in self.members or volume in self.failed:
            return False
        self.failed[volume] = how
        if self.paused(ei):
            return False
        failed = len(self.failed) - self.acknowledged
        started = len(self.members) - self.started_at_resume
        config = self.config
        by_count = 0 < config.max_failed <= failed
        by_share = started >= SHARE_SAMPLE and failed >= config.max_failed_share * started
        if not (by_count or (by_share and config.max_failed_share < 1.0)):
            return False
        self.pending = str(int(now))
        self.reason = (
            f"{self.pending}: {failed} of {started} volumes of the wave to {self.image} failed or got stuck"
            f" (limit {config.max_failed}, share {config.max_failed_share:.0%}); last: "
            f"{volume.namespace}/{volume.name} {how}"
        )
        if ei is not None:
            self.outbox.append(self._pause_event(ei, now))
        return True

    def take(self) -> list[Command]:
        out, self.outbox = self.outbox, []
        return out

    def shown(self, ei: ImageRecord | None) -> bool:
        """The default EngineImage carries this guard's pause (or there is none to carry)."""
        return not self.pending or (ei is not None and ei.paused == self.reason)

    def mark(self, ei: ImageRecord, now: float) -> Command:
        """The pause as an annotation on the default EngineImage (sent again while not shown)."""
        target = Target(kind="EngineImage", namespace=ei.namespace, name=ei.name)
        changes = (FieldValue(path=PAUSED_PATH, value=self.reason),)
        tests = (FieldValue(path="/spec/image", value=ei.image),)
        return new_command(
            service=self.service,
            verb=Verb.PATCH,
            target=target,
            changes=changes,
            preconditions=tests,
            reason=f"pause the engine upgrade wave: {self.reason}",
            created_at=now,
        )

    def _pause_event(self, ei: ImageRecord, now: float) -> Command:
        """The Warning Event about the pause (its annotation is `mark`, which the decider sends)."""
        about = Target(kind="EngineImage", namespace=ei.namespace, name=ei.name, uid=ei.uid)
        return event_command(
            service=self.service,
            about=about,
            type_=EventType.WARNING,
            reason=PAUSED_EVENT,
            message=(
                f"automatic engine upgrade paused: {self.reason}. In-flight upgrades finish; resume with "
                f"`corral engine-upgrade resume` (annotation {WAVE_PAUSED.replace('paused', 'resumed')}"
                f"={self.pending})"
            ),
            now=now,
        )
