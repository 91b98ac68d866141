"""The commands of its service a replica has seen on the bus, kept for adopting them at takeover.

Every replica follows its service's commands (command_feed.py) and results. A standby adopts each
command into its decider as it arrives, but its view may lag the view the leader decided on, so
`adopt` can skip a command whose precondition the standby's view does not show yet. When
the replica becomes leader it first catches its view up with the bus and then adopts everything
here once more, from a view at least as fresh as its predecessor's (takeover.py).

Only recent commands matter: one older than `horizon` (the decider's command_ttl) has been given up
by its issuer, and the actuator refuses commands older than its max_command_age, which is
configured below command_ttl. So memory is bounded by the commands of the last `horizon` seconds,
not by the cluster's size.

Results are matched to commands by id, and the same decision taken again has the same id (ids hash
the decision, not its time). So a refusal cannot tell which of two identical commands it answered
(clocks of different pods cannot settle it either), and a refusal here never stops an adoption: a
refused command that is adopted holds its slot until a result arrives for it or command_ttl
passes, which costs a little time after a takeover and never the limit. A refusal that arrives
after the adoption settles it as usual (`record_result`). `applied` results are kept for
`applied_horizon` (the decider's applied_ttl: how long a view may lag a write): the write happened,
so the view must show it before the new leader decides, and an adopted command with an `applied`
result stays in flight until the view shows it.
"""

from __future__ import annotations

from collections.abc import Iterator

from corral_model.envelopes import Command, CommandResult, Outcome


class SeenCommands:
    """Commands of one service by command id, forgotten `horizon` seconds after they were made,
    and their `applied` results, forgotten `applied_horizon` seconds after they finished (wall
    clock; created_at / finished_at when they say it is older than when it was seen)."""

    def __init__(self, horizon: float, applied_horizon: float | None = None) -> None:
        self.horizon = horizon
        self.applied_horizon = horizon if applied_horizon is None else applied_horizon
        self._commands: dict[str, tuple[float, Command]] = {}
        self._applied: dict[str, tuple[float, CommandResult]] = {}

    def __len__(self) -> int:
        return len(self._commands)

    def command(self, command: Command, now: float) -> bool:
        """Remember `command`; False when it is too old to matter (nothing to adopt), or an Event
        (a report: it holds nothing, and the view never shows it)."""
        if command.target.kind == "Event":
            return False
        born = command.created_at if 0 < command.created_at < now else now
        if now - born > self.horizon:
            return False
        self._commands[command.id] = (born + self.horizon, command)
        return True

    def result(self, result: CommandResult, now: float) -> None:
        if result.outcome is not Outcome.APPLIED or result.dry_run or result.target.kind == "Event":
            return  # an Event is never in the view: a new leader must not wait to see it
        finished = result.finished_at if 0 < result.finished_at < now else now
        if now - finished <= self.applied_horizon:
            self._applied[result.command_id] = (finished + self.applied_horizon, result)

    def applied(self, command_id: str) -> CommandResult | None:
        """The `applied` result of a command with this id, if one was seen."""
        entry = self._applied.get(command_id)
        return entry[1] if entry is not None else None

    def adoptable(self) -> Iterator[tuple[Command, CommandResult | None]]:
        """Every remembered command, with its `applied` result when there is one."""
        for _, command in list(self._commands.values()):
            yield command, self.applied(command.id)

    def writes(self) -> Iterator[CommandResult]:
        """Recent `applied` results that wrote something (with the object's new resourceVersion)."""
        for _, result in list(self._applied.values()):
            if result.resource_version:
                yield result

    def prune(self, now: float) -> None:
        for table in (self._commands, self._applied):
            stale = [key for key, (until, _) in table.items() if until < now]
            for key in stale:
                del table[key]
