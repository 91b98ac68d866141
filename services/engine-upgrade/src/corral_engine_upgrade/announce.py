"""Status inside the cluster: Kubernetes Events on each Volume when its automatic upgrade starts,
completes or is blocked (with the reason), so an operator with only `kubectl describe volume`
sees the wave.

One Event per transition, never one per decision pass: each volume remembers what its Events last
said (`VolumeRecord.announced`), and a new Event is made only when that changes. The Events are
commands (corral_decision.events) the decider returns from `decide()`; the actuator records them,
and a repeat of the same Event on the same volume increments its `count`, as Kubernetes does.

Started and completed are read from the view (spec.image moving to the default image, then
status.currentImage following), so they are reported whoever drives the upgrade: corral, or
Longhorn's own loop while corral observes beside it. Blocked is the first per-volume rule that
holds the volume back (reasons.py) among those only the volume's own state can clear; reasons that
settle by themselves in moments (attaching, the new image still deploying), the limit and the
retry backoff are not "blocked". Until the view is bootstrapped nothing is announced, and neither
is anything while the loop is disabled (limit 0): then nothing is blocked, nothing is being done.
"""

from __future__ import annotations

from collections import deque

from corral_decision.events import EventType, event_command
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import VolumeRecord
from corral_engine_upgrade.view import ClusterView
from corral_model.envelopes import Command, Target

STARTED = "started"

BLOCKING = frozenset(
    {
        Reason.UNREADABLE,
        Reason.EXPANDING,
        Reason.DEGRADED,
        Reason.NOT_HEALTHY,
        Reason.DR_VOLUME,
        Reason.MIGRATING,
        Reason.STRICT_LOCAL,
        Reason.CURRENT_IMAGE_MISSING,
        Reason.INCOMPATIBLE_CONTROLLER_API,
        Reason.NO_REPLICA_NODES,
        Reason.IMAGE_NOT_READY,
    }
)

OUTBOX_LIMIT = 4096
"""Events said but not yet taken by `decide()`. A standby (which never decides) keeps only the
latest; a replica that becomes leader starts from an empty outbox (its predecessor reported)."""

# What a transition says, as it was when said: (namespace, name, uid of the volume (UTF-8, as the
# record keeps it; decoded in `take`), type, reason, message, when). Its Event command (two hashes,
# a body) is built only when `decide()` takes it: a standby, which never decides, builds none, and
# a leader builds a pass's Events in one run.
Said = tuple[str, str, bytes, EventType, str, str, float]


class Announcer:
    """Turns a volume's transitions into Event commands, held until the next `decide()`."""

    def __init__(self, service: str, view: ClusterView) -> None:
        self.service = service
        self.view = view
        self.outbox: deque[Said] = deque(maxlen=OUTBOX_LIMIT)

    def images_moved(self, volume: VolumeRecord, now: float) -> None:
        """After an event changed a volume's facts: an upgrade to the default image started, or
        one announced as started ended."""
        spec_image = volume.spec_image
        default_image = self.view.default_image
        desk = volume.desk  # what was announced is on it (desk.py)
        if spec_image != volume.current_image:
            if (
                (desk is None or desk.announced != STARTED)
                and spec_image == default_image
                and self.view.limit > 0
            ):
                volume.announced = STARTED
                mode = "live" if volume.state == "attached" else "offline"
                self._emit(
                    volume,
                    EventType.NORMAL,
                    "EngineUpgradeStarted",
                    f"automatic engine upgrade started ({mode}): {volume.current_image} -> {spec_image}"
                    f" (owner node {volume.owner or '-'})",
                    now,
                )
        elif desk is not None and desk.announced == STARTED:
            desk.announced = ""
            if spec_image == default_image:
                self._emit(
                    volume,
                    EventType.NORMAL,
                    "EngineUpgradeCompleted",
                    f"automatic engine upgrade completed: now on {spec_image}",
                    now,
                )
            else:
                self._emit(
                    volume,
                    EventType.WARNING,
                    "EngineUpgradeRolledBack",
                    f"engine upgrade ended on {spec_image}, not on the default image {default_image}",
                    now,
                )

    def judged(self, volume: VolumeRecord, reason: Reason | None, now: float) -> None:
        """After the rules judged a volume: blocked by a new reason, or no longer blocked."""
        if reason in BLOCKING:
            if volume.announced != reason and self.view.limit > 0:
                volume.announced = str(reason)
                detail = self.view.unreadable_reason(volume) if reason is Reason.UNREADABLE else ""
                self._emit(
                    volume,
                    EventType.WARNING,
                    "EngineUpgradeBlocked",
                    f"automatic engine upgrade to {self.view.default_image} blocked: {reason}"
                    + (f" ({detail})" if detail else ""),
                    now,
                )
        elif volume.announced and volume.announced != STARTED:
            volume.announced = ""  # unblocked: blocked again later is a new occurrence

    def take(self) -> list[Command]:
        """The Event commands of everything said since the last call, in order."""
        service = self.service
        commands = [
            event_command(
                service=service,
                # with its uid, or `kubectl describe volume` would not list the Event (it matches by uid)
                about=Target(kind="Volume", namespace=namespace, name=name, uid=uid.decode()),
                type_=type_,
                reason=reason,
                message=message,
                now=now,
            )
            for namespace, name, uid, type_, reason, message, now in self.outbox
        ]
        self.outbox.clear()
        return commands

    def _emit(self, volume: VolumeRecord, type_: EventType, reason: str, message: str, now: float) -> None:
        self.outbox.append((volume.namespace, volume.name, volume.uid_utf8, type_, reason, message, now))
