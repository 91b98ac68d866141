"""A toy decision service written against the kit alone: it sets every Setting's value to "done",
never more than LIMIT commands in flight. The kit's handover and replay tests run it as they would
any service; its rules are all it writes (the kit owns expectations, results, adoption, timers)."""

from __future__ import annotations

from typing import Any

from corral_decision import Clock, DecisionConfig, DecisionService, Explanation
from corral_decision.base import DeciderBase, key_of
from corral_model.envelopes import Command, FieldValue, ObjectEvent, Target, Verb, new_command
from corral_model.longhorn import Setting

LIMIT = 2
DONE = (FieldValue(path="/value", value="done"),)


class ToyDecider(DeciderBase):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock, reads=["setting"], service="toy")
        self.values: dict[str, str] = {}

    def apply(self, event: ObjectEvent[Any]) -> None:
        key = self.observe(event)
        if key is not None and event.object is not None:
            self.values[event.name] = event.object.value
            if event.object.value == "done":
                self.settle(key)  # the view shows it

    def may_adopt(self, command: Command) -> bool:
        return self.values.get(command.target.name, "done") != "done"

    def reconcile(self, now: float) -> list[Command]:
        commands: list[Command] = []
        for name, value in sorted(self.values.items()):
            target = Target(kind="Setting", namespace="longhorn-system", name=name)
            if self.expected.count < LIMIT and value != "done" and not self.in_flight(key_of(target)):
                command = new_command(service="toy", verb=Verb.PATCH, target=target, changes=DONE)
                commands.append(self.issue(command, key_of(target)))
        return commands

    def explain(self, key: str | None = None) -> list[Explanation]:
        return [
            Explanation(kind="Setting", namespace="longhorn-system", name=n, reason=v)
            for n, v in self.values.items()
        ]


TOY = DecisionService(
    name="toy",
    config=DecisionConfig,
    reads={"setting": Setting},
    commands=frozenset({"setting"}),
    new_decider=lambda config, clock: ToyDecider(clock),
)
