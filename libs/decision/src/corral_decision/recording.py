"""What a bundle says one service commanded: its commands, known by id, wherever the bundle names them.

LH_COMMANDS is a work queue: a command the actuator has finished is gone from it, so a bundle dumped
after a wave holds few commands, or none. Every finished command left a result on LH_RESULTS naming
its `command_id` and target, though, and a command id hashes service, target, intent and
preconditions (never time), so the same decision taken again has the same id. So the recording of
a service is every command id that appears either as a command on `lh.cmd.<service>.>` (full
payload: still queued, or recorded live with `corral events dump --follow`) or in a result on
`lh.res.<service>.>`, and a replay is compared with it id by id (command_diff.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral_decision.bundle import Line
from corral_decision.decider import target_key
from corral_model.envelopes import Command, CommandResult, Target


@dataclass
class RecordedCommand:
    """One command id of the service as the bundle shows it."""

    id: str
    target: Target
    first: Line
    """Where the bundle first names it (its command line, or the first result for it)."""
    after: Line | None = None
    """The last line of the service's input (an object event or result) before `first`: when
    `first` is the command itself, what the live service had just seen when it decided."""
    command: Command | None = None
    """The full command, when the bundle holds it."""
    outcomes: list[str] = field(default_factory=list)
    """The outcomes of its results, in bundle order."""

    @property
    def key(self) -> str:
        return target_key(self.target.kind, self.target.namespace, self.target.name)


class Recording:
    """The commands of one service in a bundle, by id, in the order the bundle first names them."""

    def __init__(self) -> None:
        self.commands: dict[str, RecordedCommand] = {}

    def command(self, line: Line, command: Command, after: Line | None = None) -> None:
        known = self.commands.get(command.id)
        if known is None:
            self.commands[command.id] = RecordedCommand(command.id, command.target, line, after, command)
        elif known.command is None:
            known.command = command

    def result(self, line: Line, result: CommandResult, after: Line | None = None) -> None:
        known = self.commands.get(result.command_id)
        if known is None:
            known = RecordedCommand(result.command_id, result.target, line, after)
            self.commands[result.command_id] = known
        known.outcomes.append(str(result.outcome))
