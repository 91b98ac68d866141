"""A way out for a stuck volume where Longhorn has one: `spec.image` rolled back to the image it runs.

Longhorn itself has exactly one way out of an engine upgrade that does not finish: its manual
`engineUpgrade` API accepts, while an upgrade is under way, only a request for the volume's
`status.currentImage`, "a rollback" (longhorn-behaviour.md §1.5, rule 4), and its volume controller
then brings the engine back to that image (it re-images a detached volume; an attached one's engine
switches back through the instance manager, which needs the old image deployed). So a stuck volume
(stuck.py) has a way out when:

* it has not switched over: its `status.currentImage` is still the old image. The volume controller
  sets currentImage only once the engine runs the new image and the replicas are swapped (§1.5), so
  this is what the view can know without Engine objects (this service reads none: an engine's own
  `status.currentImage` would say the same a little earlier, and Longhorn's API itself accepts the
  rollback on the volume's);
* the old image is still deployed: its EngineImage exists, is `deployed`, usable (not incompatible,
  not being deleted) and ready on the attached node and every replica's node (rule 5 of the API);
* Longhorn's API would accept it: a v1 volume, not migrating, and attached only while healthy
  (rule 8: "cannot do live upgrade for a unhealthy volume"; a degraded stuck volume waits).

The rollback is the operator's decision by default (`RollbackMode.APPROVED`): the stuck volume
says it is "awaiting rollback approval" (its Warning Event, `corral plan --explain`, `corral
progress`) until `engine-upgrade.corral.io/rollback-approved` on it names the
image it is stuck on (`corral engine-upgrade rollback <volume>` writes it). `AUTO` rolls back as
soon as the volume is named stuck, `OFF` never. The command is preconditioned like an upgrade (the
volume's images, state, owner node, robustness when attached, generation, and its uid), and writes,
in the same patch, `engine-upgrade.corral.io/rolled-back: <the image it left>`: the volume is held
off that image (reason `rolled-back`) while it is the default, instead of being picked again into
the same stall as Longhorn would; a new default image, or the operator removing the annotation,
lets it go, and the upgrade that then comes removes the annotation in its own patch. The actuator
holds on facts that the image it writes is the one the volume runs. Once the view shows the
rollback, a Warning Event on the Volume says from what, to what and why.
"""

from __future__ import annotations

import enum

from corral_decision.events import EventType, event_command
from corral_engine_upgrade.records import MIGRATING, ROLLBACK_APPROVED, ROLLED_BACK, V2, replica_nodes
from corral_engine_upgrade.records import VolumeRecord as Volume
from corral_engine_upgrade.view import ClusterView
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command

ROLLED_BACK_EVENT = "EngineUpgradeRolledBack"  # the reason announce.py gives any upgrade undone
AWAITING_APPROVAL = "awaiting rollback approval"
ROLLED_BACK_PATH = "/metadata/annotations/" + ROLLED_BACK.replace("/", "~1")


class RollbackMode(enum.StrEnum):
    """When a stuck volume with a way out is rolled back (CORRAL_STUCK_ROLLBACK)."""

    AUTO = "auto"  # as soon as it is named stuck
    APPROVED = "approved"  # once the operator approves it (ROLLBACK_APPROVED on the volume)
    OFF = "off"  # never: it stays stuck, named


def no_way_out(volume: Volume, view: ClusterView) -> str:
    """Why Longhorn has no way out of `volume`'s upgrade ("" when a rollback is possible)."""
    current = volume.current_image
    if volume.flags & V2:
        return "a v2 volume's image is its instance manager's"
    if not current or volume.spec_image == current:
        return "no upgrade under way"
    if volume.flags & MIGRATING:
        return "the volume is migrating"
    if volume.state == "attached" and volume.robustness != "healthy":
        health = volume.robustness or "-"
        return f"Longhorn rolls back a live upgrade only on a healthy volume; it is {health}"
    if volume.state not in ("attached", "detached"):
        return f"the volume is {volume.state or 'in no state'}"
    ei = view.current_engine_image(volume)
    if ei is None or not ei.usable or not ei.deployed:
        state = "gone" if ei is None else "not usable" if not ei.usable else "not deployed"
        return f"its old image {current} is {state}"
    nodes = {volume.node, *replica_nodes(volume.replicas)} - {""}
    missing = sorted(str(n) for n in nodes if n not in ei.ready_nodes)
    if missing:
        return f"its old image {current} is not ready on {', '.join(missing)}"
    return ""


def approved(volume: Volume) -> bool:
    """The operator approved rolling back the upgrade `volume` has under way (the one to the image
    the approval names: an approval left from an older stall approves nothing new)."""
    marks = volume.marks
    return marks is not None and bool(marks.approved) and marks.approved == volume.spec_image


def approve_hint(volume: Volume) -> str:
    return (
        f"Longhorn can roll it back to {volume.current_image}, the image it runs: approve with `corral"
        f" engine-upgrade rollback {volume.name} --namespace {volume.namespace}` (annotation"
        f" {ROLLBACK_APPROVED}={volume.spec_image})"
    )


def rollback_command(
    service: str, volume: Volume, tests: tuple[FieldValue, ...], why: str, now: float
) -> Command:
    """spec.image back to status.currentImage, and the image left recorded on the volume."""
    target = Target(kind="Volume", namespace=volume.namespace, name=volume.name)
    changes = (
        FieldValue(path="/spec/image", value=volume.current_image),
        FieldValue(path=ROLLED_BACK_PATH, value=volume.spec_image),
    )
    if volume.uid:
        tests = (*tests, FieldValue(path="/metadata/uid", value=volume.uid))
    return new_command(
        service=service,
        verb=Verb.PATCH,
        target=target,
        changes=changes,
        preconditions=tests,
        reason=f"rollback of a stuck engine upgrade {volume.spec_image} -> {volume.current_image} ({why})",
        created_at=now,
    )


class Rollback:
    """One rollback sent: what it left and why, until the view shows it."""

    __slots__ = ("from_image", "to_image", "why")

    def __init__(self, from_image: str, to_image: str, why: str) -> None:
        self.from_image = from_image
        self.to_image = to_image
        self.why = why


class Rollbacks:
    """The rollbacks sent and not yet seen (a few at most), and the Events of those seen."""

    def __init__(self, service: str, mode: RollbackMode = RollbackMode.APPROVED) -> None:
        self.service = service
        self.mode = mode
        self.sent: dict[Volume, Rollback] = {}
        self.outbox: list[Command] = []

    def wanted(self, volume: Volume, view: ClusterView) -> bool:
        """`volume` (named stuck) is to be rolled back now: Longhorn has a way out, and the mode or
        the operator's approval says so."""
        if self.mode is RollbackMode.OFF:
            return False
        if self.mode is RollbackMode.APPROVED and not approved(volume):
            return False
        return not no_way_out(volume, view)

    def hint(self, volume: Volume, view: ClusterView) -> str:
        """A stuck volume's way out, as an operator reads it next to the evidence ("" when off)."""
        if self.mode is RollbackMode.OFF:
            return ""
        why = no_way_out(volume, view)
        if why:
            return f"no rollback: {why}"
        if volume in self.sent:
            return f"rolling back to {volume.current_image}"
        if self.mode is RollbackMode.APPROVED and not approved(volume):
            return f"{AWAITING_APPROVAL}: {approve_hint(volume)}"
        return f"to be rolled back to {volume.current_image}"

    def how(self) -> str:
        return "approved by the operator" if self.mode is RollbackMode.APPROVED else "automatic"

    def send(self, command: Command, volume: Volume, evidence: str) -> None:
        reason = f"{self.how()}; stuck: {evidence}"
        self.sent[volume] = Rollback(volume.spec_image, volume.current_image, reason)
        self.outbox.append(command)

    def ended(self, volume: Volume, now: float, announce: bool) -> None:
        """`volume`'s upgrade is no longer in flight: when it was our rollback, say so."""
        sent = self.sent.pop(volume, None)
        if sent is None or volume.spec_image != sent.to_image or not announce:
            return
        volume.announced = ""  # this Event says it, not announce.py's "ended, not on the default"
        self.outbox.append(
            event_command(
                service=self.service,
                about=volume.about,
                type_=EventType.WARNING,
                reason=ROLLED_BACK_EVENT,
                message=(
                    f"engine upgrade rolled back: spec.image {sent.from_image} -> {sent.to_image}, the"
                    f" image it runs ({sent.why}). Held on {sent.to_image} while {sent.from_image} is"
                    f" the default engine image (annotation {ROLLED_BACK}; remove it to let it go)"
                ),
                now=now,
            )
        )

    def take(self) -> list[Command]:
        out, self.outbox = self.outbox, []
        return out
