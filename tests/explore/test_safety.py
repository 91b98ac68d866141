"""The explorer's per-node limit rule, without a world: the hooks driven as the API server drives
them. It judges the limit of the explored decider's mode, and in `replace` Longhorn's setting as
the decision could have read it (engine-upgrade/rolled-back/setting-changed failed on an upgrade
decided under 1 that landed just after the setting went 0)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

from tests.explore.safety import Safety
from tests.explore.services import Explored
from tests.fixtures.sandbox import Sandbox

Obj = dict[str, Any]
Hook = Callable[[str, Obj | None, Obj | None], None]
LIMIT = "concurrent-automatic-engine-upgrade-per-node-limit"


class FakeEmulator:
    """The API server's objects and admission hooks, as Safety uses them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}
        self.hooks: dict[str, list[Hook]] = {}

    def register_admission(self, group: str, plural: str, hook: Hook, **_: Any) -> None:
        self.hooks.setdefault(plural, []).append(hook)

    def get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get((plural, name))

    def list(self, group: str, plural: str, namespace: str) -> list[Obj]:
        return [obj for (kind, _), obj in self.objects.items() if kind == plural]

    def write(self, plural: str, new: Obj) -> None:
        key = (plural, str(new["metadata"]["name"]))
        old = self.objects.get(key)
        for hook in self.hooks.get(plural, []):
            hook("UPDATE", old, new)
        self.objects[key] = new


class FakeSandbox:
    namespace = "longhorn-system"

    def __init__(self) -> None:
        self.emulator = FakeEmulator()


class Replace(Explored):
    name = "engine-upgrade"
    limit_setting = LIMIT


class Auto(Replace):
    decider_settings: ClassVar[dict[str, Any]] = {"mode": "auto", "per_node_limit": 2}


def volume(name: str, image: str, current: str = "old") -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"image": image, "nodeID": "node-1"},
        "status": {"currentImage": current, "state": "attached", "ownerID": "node-1"},
    }


def setting(value: str) -> Obj:
    return {"metadata": {"name": LIMIT}, "value": value}


def judge(spec: Explored) -> tuple[FakeEmulator, Safety]:
    sandbox = FakeSandbox()
    emulator = sandbox.emulator
    emulator.objects[("settings", LIMIT)] = setting("1")
    for name in ("vol-a", "vol-b"):
        emulator.objects[("volumes", name)] = volume(name, "old")
    safety = Safety(cast("Sandbox", sandbox), spec)
    safety.judging = True
    return emulator, safety


def test_replace_judges_the_setting_the_decision_could_have_read() -> None:
    emulator, safety = judge(Replace())
    emulator.write("volumes", volume("vol-a", "old", "old"))  # the state the decision rests on
    emulator.write("settings", setting("0"))  # after it: the decision may predate the change
    emulator.write("volumes", volume("vol-a", "new"))
    assert safety.violations == []


def test_replace_judges_a_setting_changed_before_the_volume_last_changed() -> None:
    emulator, safety = judge(Replace())
    emulator.write("settings", setting("0"))
    emulator.write("volumes", volume("vol-a", "old", "old"))  # decided on this, the limit 0 by then
    emulator.write("volumes", volume("vol-a", "new"))
    assert len(safety.violations) == 1
    assert "limit 0" in safety.violations[0]


def test_replace_counts_the_upgrades_in_flight_against_the_setting() -> None:
    emulator, safety = judge(Replace())
    emulator.write("volumes", volume("vol-a", "new"))
    emulator.write("volumes", volume("vol-b", "new"))
    assert len(safety.violations) == 1
    assert "vol-b began" in safety.violations[0]


def test_other_modes_judge_corrals_own_limit_not_longhorns_setting() -> None:
    emulator, safety = judge(Auto())
    emulator.write("settings", setting("0"))  # Longhorn's own loop off: corral acts, limit 2
    emulator.write("volumes", volume("vol-a", "new"))
    emulator.write("volumes", volume("vol-b", "new"))
    assert safety.violations == []
    emulator.objects[("volumes", "vol-c")] = volume("vol-c", "old")
    emulator.write("volumes", volume("vol-c", "new"))
    assert len(safety.violations) == 1
    assert "limit 2" in safety.violations[0]
