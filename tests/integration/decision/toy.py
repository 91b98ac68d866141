"""A toy decision service written against the kit alone: it sets every Setting's value to "done",
never more than LIMIT commands in flight. The kit's handover tests run it as they would any service."""

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
        super().__init__(clock, reads=["setting"])
        self.values: dict[str, str] = {}

    def apply(self, event: ObjectEvent[Any]) -> None:
        key = self.observe(event)
        if key is not None and event.object is not None:
            self.values[event.name] = event.object.value
            if event.object.value == "done":
                self.settle(key)

    def may_adopt(self, command: Command) -> bool:
        return self.values.get(command.target.name, "done") != "done"

    def decide(self) -> list[Command]:
        commands: list[Command] = []
        for name, value in sorted(self.values.items()):
            target = Target(kind="Setting", namespace="longhorn-system", name=name)
            if len(self.pending) < LIMIT and value != "done" and key_of(target) not in self.pending:
                commands.append(new_command(service="toy", verb=Verb.PATCH, target=target, changes=DONE))
                self.expect(commands[-1])
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
