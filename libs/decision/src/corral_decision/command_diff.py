"""The replayed commands against the recorded ones: the answer `corral replay` exists to give.

Commands are matched by id. An id hashes service, target, intent and preconditions and not time
(corral_model.envelopes.command_id), so the replay reproduces the live decision exactly when it
reproduces its id, and a bundle whose commands survive only as results (recording.py) compares as
well as one that holds them all. Ids are compared as sets: the same attempt sent twice is one
decision (JetStream drops the copy inside its dedup window anyway); a retry after a refusal or an
expiry is its next attempt, under an id of its own (`Command.attempt`), as the replay's is when it
replays the same refusal.

A recorded id the replay never made is `missing`, a replayed id the recording never names is
`extra`. One of each on the same target is almost always one decision taken differently (another
precondition, another image), so the pair is reported as one `changed` difference. So is a
recorded command (when the bundle holds it whole) whose target, change or preconditions are not
what its id was made from: an edited or corrupted recording.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from corral_decision.bundle import Line
from corral_decision.decider import target_key
from corral_decision.recording import RecordedCommand
from corral_model.envelopes import Command


class Match(enum.StrEnum):
    SAME = "same"
    MISSING = "missing"  # recorded, not replayed
    EXTRA = "extra"  # replayed, not recorded
    CHANGED = "changed"  # one missing and one extra on the same target


@dataclass(frozen=True)
class ReplayedCommand:
    """A command the replay made, and the bundle line applied last before the decision."""

    command: Command
    after: Line | None
    timer: bool = False
    """Decided because the decider's own timer (`next_due`) came due, not after an event."""
    at: float = 0.0
    """The recorded time (seconds) it was decided at."""

    @property
    def key(self) -> str:
        target = self.command.target
        return target_key(target.kind, target.namespace, target.name)


@dataclass(frozen=True)
class Difference:
    match: Match
    key: str
    replayed: ReplayedCommand | None = None
    recorded: RecordedCommand | None = None

    @property
    def id(self) -> str:
        """The replayed command's id (the recorded one's when nothing was replayed)."""
        if self.replayed is not None:
            return self.replayed.command.id
        assert self.recorded is not None
        return self.recorded.id


def compare(
    replayed: Sequence[ReplayedCommand],
    recorded: Mapping[str, RecordedCommand],
    confirm_only: Collection[str] = (),
) -> list[Difference]:
    """Every command id on either side, sorted by target key then id. Ids in `confirm_only` (named
    by the recording only after `--until`: a result comes after its command) make a replayed
    command the `same` one, and are never `missing`."""
    first: dict[str, ReplayedCommand] = {}
    for made in replayed:
        first.setdefault(made.command.id, made)
    same: list[Difference] = []
    missing: dict[str, list[RecordedCommand]] = {}
    extra: dict[str, list[ReplayedCommand]] = {}
    for id_, made in first.items():
        if id_ in recorded:
            seen = recorded[id_]
            match = (
                Match.SAME
                if seen.command is None or _same_decision(made.command, seen.command)
                else Match.CHANGED
            )
            same.append(Difference(match, made.key, made, seen))
        elif id_ in confirm_only:
            same.append(Difference(Match.SAME, made.key, made))  # its result came after `until`
        else:
            extra.setdefault(made.key, []).append(made)
    for id_, seen in recorded.items():
        if id_ not in first and id_ not in confirm_only:
            missing.setdefault(seen.key, []).append(seen)
    out = same
    for key in sorted(set(missing) | set(extra)):
        gone, made_only = missing.get(key, []), extra.get(key, [])
        if len(gone) == 1 and len(made_only) == 1:
            out.append(Difference(Match.CHANGED, key, made_only[0], gone[0]))
            continue
        out.extend(Difference(Match.MISSING, key, recorded=r) for r in gone)
        out.extend(Difference(Match.EXTRA, key, replayed=r) for r in made_only)
    return sorted(out, key=_order)


def _same_decision(made: Command, seen: Command) -> bool:
    """What the id hashes, compared field by field: a recorded command edited (or corrupted) after
    its id was made is a difference, not a match."""
    return (made.service, made.verb, made.target, made.changes, made.preconditions) == (
        seen.service,
        seen.verb,
        seen.target,
        seen.changes,
        seen.preconditions,
    )


def _order(difference: Difference) -> tuple[str, str, str]:
    return (difference.key, str(difference.match), difference.id)
