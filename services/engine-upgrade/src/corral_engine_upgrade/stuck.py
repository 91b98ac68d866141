"""Stuck is a state with a name: an upgrade in flight for longer than a normal one takes.

Longhorn counts an upgrade in flight while `spec.image != status.currentImage` (§1.1) and retries a
failed one for ever, so a volume whose new replicas stopped, or whose engine never reports the new
image, holds one of its owner node's slots with no word to anyone (longhorn/longhorn#3916, #5618,
#1524, #13323, #6378). corral counts in flight the same way, so it must at least say so: this module
times every upgrade in flight from the moment the view first shows it, and once it has lasted past
its bound names it stuck, with what the view says about the volume (a Warning Event on the Volume,
`corral plan --explain`, the per-node gauge, `corral progress`).

It keeps a table of the volumes in flight only (a few per owner node, never one entry per volume of
the cluster), and asks the kit to wake the volume when its bound comes (`DeciderKit.ask_again`): it
has no timer queue of its own. Being stuck does not free the slot (Longhorn's volume controller may
still finish the upgrade; the wave guard, wave_guard.py, decides what a stuck volume means for the
wave); the slot it holds is made visible instead.

The bounds (`StuckBounds`): a live upgrade starts one new replica per replica, switches the engine
and swaps the replicas. Longhorn's own tests give it minutes (the engine-upgrade tests wait up to
RETRY_COUNTS x RETRY_INTERVAL, 5 min, for `currentImage`), and in clusters it takes tens of seconds
to a couple of minutes, longer for replicas on slow disks; the sandbox's simulated one takes
`live_upgrade_seconds` (0.2 s by default, 1 s in the scenarios). An offline upgrade only re-images
the engine and replicas of a detached volume, which the volume controller does in one sync: seconds.
So 10 minutes live and 5 minutes offline: well past any normal upgrade (no false alarm during a
slow but healthy wave), short enough that an operator hears of a stuck one in the same sitting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import msgspec

from corral_decision.events import EventType, event_command
from corral_engine_upgrade.records import STRIDE, VolumeRecord, replica_nodes
from corral_model.envelopes import Command

STUCK_EVENT = "EngineUpgradeStuck"


class StuckBounds(msgspec.Struct, frozen=True, kw_only=True):
    """How long an upgrade may stay in flight before it is named stuck (seconds)."""

    live: float = 600.0
    offline: float = 300.0

    def of(self, volume: VolumeRecord) -> float:
        """The bound for the upgrade `volume` has under way: live when it is attached."""
        return self.live if volume.state == "attached" else self.offline


class InFlight(msgspec.Struct, gc=False):
    """One upgrade under way: since when the view shows it, and its bound."""

    since: float
    bound: float
    stuck: str = ""  # the evidence, once named stuck

    @property
    def due(self) -> float:
        return self.since + self.bound


def evidence(volume: VolumeRecord, flight: InFlight, now: float) -> str:
    """What the view says about a stuck upgrade, in words an operator can act on."""
    nodes = sorted({n for n in replica_nodes(volume.replicas) if n})
    mode = "a live" if volume.state == "attached" else "an offline"
    replicas = f"{len(volume.replicas) // STRIDE} replica(s) on {', '.join(nodes) or 'no node'}"
    return (
        f"in flight {now - flight.since:.0f}s, past the {flight.bound:.0f}s bound of {mode} upgrade: "
        f"spec.image {volume.spec_image}, status.currentImage still {volume.current_image or '-'}; "
        f"state {volume.state or '-'}, robustness {volume.robustness or '-'}, {replicas}; "
        f"holds a slot on owner node {volume.owner or '-'}"
    )


class StuckWatch:
    """The upgrades in flight, timed; those past their bound named stuck."""

    def __init__(
        self,
        service: str,
        bounds: StuckBounds | None = None,
        hint: Callable[[VolumeRecord], str] | None = None,
    ) -> None:
        self.service = service
        self.bounds = bounds or StuckBounds()
        # What the Warning Event adds to the evidence (the way out, rollback.py), "" for nothing.
        self.hint = hint
        self.in_flight: dict[VolumeRecord, InFlight] = {}
        self.outbox: list[Command] = []  # the Warning Events, taken by the decider's reconcile

    def started(self, volume: VolumeRecord, now: float) -> float | None:
        """`volume` is in flight in the view: when to look at it again (None: already timed)."""
        if volume in self.in_flight:
            return None
        flight = self.in_flight[volume] = InFlight(since=now, bound=self.bounds.of(volume))
        return flight.due

    def ended(self, volume: VolumeRecord) -> InFlight | None:
        """`volume` is no longer in flight (done, rolled back, deleted): what was timed of it."""
        return self.in_flight.pop(volume, None)

    def check(self, volume: VolumeRecord, now: float, announce: bool) -> str:
        """The wake for `volume` came: the evidence when it is newly stuck, "" otherwise."""
        flight = self.in_flight.get(volume)
        if flight is None or flight.stuck or now < flight.due or volume.spec_image == volume.current_image:
            return ""
        flight.stuck = evidence(volume, flight, now)
        if announce:
            hint = self.hint(volume) if self.hint is not None else ""
            self.outbox.append(
                event_command(
                    service=self.service,
                    about=volume.about,
                    type_=EventType.WARNING,
                    reason=STUCK_EVENT,
                    message=f"engine upgrade stuck: {flight.stuck}" + (f"; {hint}" if hint else ""),
                    now=now,
                )
            )
        return flight.stuck

    def stuck(self, volume: VolumeRecord) -> str:
        """The evidence `volume` was named stuck with ("" while it is not)."""
        flight = self.in_flight.get(volume)
        return flight.stuck if flight is not None else ""

    def stuck_volumes(self) -> Iterator[tuple[VolumeRecord, str]]:
        for volume, flight in self.in_flight.items():
            if flight.stuck:
                yield volume, flight.stuck

    def stuck_by_node(self) -> Counter[str]:
        """Stuck upgrades per owner node: the slots they hold."""
        return Counter(volume.owner for volume, _ in self.stuck_volumes())

    def take(self) -> list[Command]:
        out, self.outbox = self.outbox, []
        return out
