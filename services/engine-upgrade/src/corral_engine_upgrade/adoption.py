"""The engine-upgrade commands a replica has seen on the bus, kept for adopting them at takeover.

Every replica follows its service's commands (command_feed.py) and results. A standby adopts each
command into its decider as it arrives, but its view may lag the view the leader decided on, so
`adopt_command` can skip a command whose preconditions the standby's view does not show yet. When
the replica becomes leader it first catches its view up with the bus and then adopts everything
here once more, from a view at least as fresh as its predecessor's (runner.py, "takeover").

Only recent commands matter: one older than `horizon` (the decider's command_ttl) has been given up
by its issuer, and the actuator refuses commands older than its max_command_age, which is
configured below command_ttl. So memory is bounded by the commands of the last `horizon` seconds,
not by the cluster's size. A result is kept with its command: a refusal means there is nothing to
adopt, an `applied` one means the write happened and the view must show it before deciding.
"""

from __future__ import annotations

from collections.abc import Iterator

from corral_model.envelopes import Command, CommandResult, Outcome


class SeenCommands:
    """Commands and results of one service by command id, each forgotten `horizon` seconds after it
    was seen (wall clock; created_at / finished_at when they say it is older)."""

    def __init__(self, horizon: float) -> None:
        self.horizon = horizon
        self._commands: dict[str, tuple[float, Command]] = {}
        self._results: dict[str, tuple[float, CommandResult]] = {}

    def __len__(self) -> int:
        return len(self._commands)

    def command(self, command: Command, now: float) -> bool:
        """Remember `command`; False when it is too old or already refused (nothing to adopt)."""
        born = command.created_at if 0 < command.created_at < now else now
        if now - born > self.horizon:
            return False
        self._commands[command.id] = (born + self.horizon, command)
        known = self.result_of(command.id)
        return known is None or known.outcome is Outcome.APPLIED

    def result(self, result: CommandResult, now: float) -> None:
        finished = result.finished_at if 0 < result.finished_at < now else now
        if now - finished > self.horizon:
            return
        previous = self._results.get(result.command_id)
        if previous is not None and previous[1].outcome is Outcome.APPLIED:
            return  # a later refusal of a repeat does not undo a write that happened
        self._results[result.command_id] = (finished + self.horizon, result)

    def result_of(self, command_id: str) -> CommandResult | None:
        entry = self._results.get(command_id)
        return entry[1] if entry is not None else None

    def adoptable(self) -> Iterator[tuple[Command, CommandResult | None]]:
        """Every remembered command not refused, with its `applied` result when there is one."""
        for _, command in list(self._commands.values()):
            known = self.result_of(command.id)
            if known is None or known.outcome is Outcome.APPLIED:
                yield command, known

    def writes(self) -> Iterator[CommandResult]:
        """Recent `applied` results that wrote something (not dry-run, with a resourceVersion)."""
        for _, result in list(self._results.values()):
            if result.outcome is Outcome.APPLIED and not result.dry_run and result.resource_version:
                yield result

    def prune(self, now: float) -> None:
        for table in (self._commands, self._results):
            stale = [key for key, (until, _) in table.items() if until < now]
            for key in stale:
                del table[key]
