"""The actuator's memory of recent commands: never an answer by itself, only a hint for the facts.

JetStream's dedup window drops a repeated Nats-Msg-Id at publish time, but a command can still
arrive twice: redelivered after a lost ack, or re-published after the window. A repeat is judged
afresh on the object, every time: a patch whose change already holds is `applied` without a write
(the actuator reads before it writes), one whose change was undone since (a volume rolled back) is
written again if its preconditions hold, and a refusal (a settings value that has moved on, a
precondition that holds again) is never repeated from memory. Answering from memory is what once
told a rolled-back volume `applied` with nothing written, and kept refusing 28 commands for minutes
after the default engine image had moved.

So the record keeps two things. Commands in progress: a repeat arriving while the first copy is
still being applied waits for that result instead of writing a second time. And the last
`capacity` commands that were applied (least recently seen evicted first): the one fact the object
cannot show again is a delete that happened, so a repeated delete that finds its object gone is
`applied`, not `not-found`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from corral_model.envelopes import CommandResult, Outcome


class CommandRecord:
    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._done: OrderedDict[str, CommandResult] = OrderedDict()
        self._running: dict[str, asyncio.Future[CommandResult]] = {}

    def __len__(self) -> int:
        return len(self._done)

    def result(self, command_id: str) -> CommandResult | None:
        """The recorded result of an applied command (None when unknown, forgotten or not applied)."""
        result = self._done.get(command_id)
        if result is not None:
            self._done.move_to_end(command_id)
        return result

    def running(self, command_id: str) -> asyncio.Future[CommandResult] | None:
        return self._running.get(command_id)

    def start(self, command_id: str) -> None:
        """Mark a command as being applied (the caller checked `result` and `running` first)."""
        if command_id in self._running:
            raise RuntimeError(f"command {command_id} is already running")
        self._running[command_id] = asyncio.get_running_loop().create_future()

    def finish(self, result: CommandResult) -> None:
        """Record a command's result and wake whoever waits on a repeat of it."""
        future = self._running.pop(result.command_id, None)
        if future is not None and not future.done():
            future.set_result(result)
        if result.outcome is not Outcome.APPLIED:
            return
        self._done[result.command_id] = result
        self._done.move_to_end(result.command_id)
        while len(self._done) > self.capacity:
            self._done.popitem(last=False)

    def abandon(self, command_id: str) -> None:
        """The command was not finished (shutdown, lost connection): a repeat must apply it afresh."""
        future = self._running.pop(command_id, None)
        if future is not None and not future.done():
            future.cancel()
