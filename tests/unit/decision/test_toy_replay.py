"""The toy decider (tests/integration/decision/toy.py), written against the kit alone, replayed on a
recording's clock: it keeps its limit, a change the view shows frees a slot, and a command that
neither shows nor is answered expires after the kit's command_ttl and is sent again. Nothing in the
toy implements expectations or timers; all of that is the kit's."""

from __future__ import annotations

from typing import Any

from corral_decision.bundle import Line, entry
from corral_decision.replay import Replay
from corral_model import codec
from corral_model.envelopes import EventType, ObjectEvent, first_attempt_id
from corral_model.longhorn import ObjectMeta, Setting
from tests.integration.decision.toy import LIMIT, TOY

S = 1_000_000_000
T0 = 1_800_000_000 * S
NS = "longhorn-system"
TTL = 60.0  # DecisionConfig's command_ttl_s


def setting(number: int, at_ns: int, name: str, value: str) -> Line:
    obj = Setting(metadata=ObjectMeta(name=name, namespace=NS, resource_version=str(number)), value=value)
    event: ObjectEvent[Any] = ObjectEvent(
        type=EventType.MODIFIED,
        kind="setting",
        namespace=NS,
        name=name,
        resource_version=str(number),
        object=obj,
    )
    subject = f"lh.obj.setting.{NS}.{name}"
    return Line(number, entry("LH_OBJECTS", number, at_ns, subject, {}, codec.encode(event)), at_ns)


def resync(number: int, at_ns: int) -> Line:
    event: ObjectEvent[Any] = ObjectEvent(type=EventType.RESYNCED, kind="setting", namespace=NS, name="")
    subject = f"lh.obj.setting.{NS}._resync"
    return Line(number, entry("LH_OBJECTS", number, at_ns, subject, {}, codec.encode(event)), at_ns)


def test_the_toy_replays_within_its_limit_and_the_kit_expires_and_resends() -> None:
    names = [f"s{i}" for i in range(4)]
    lines = [setting(i + 1, T0, n, "x") for i, n in enumerate(names)]
    lines.append(resync(5, T0))
    lines.append(setting(6, T0 + S, "s0", "done"))  # the view shows s0's command: its slot frees
    lines.append(setting(7, T0 + 100 * S, "s3", "x"))  # the recording goes on past the TTLs
    report = Replay(TOY).feed_all(lines)
    made = [(m.command.target.name, m.at) for m in report.replayed]
    start = T0 / S
    assert made[:LIMIT] == [("s0", start), ("s1", start)]
    assert made[LIMIT] == ("s2", start + 1)
    # s1 and s2 were never answered nor shown: each expires after the TTL and is sent again, as
    # the same decision's second attempt (an id of its own, which LH_COMMANDS' dedup window does not
    # drop), never more than LIMIT at once
    assert made[LIMIT + 1 :] == [("s1", start + TTL), ("s2", start + 1 + TTL)]
    first = {m.command.target.name: m.command.id for m in report.replayed[1 : LIMIT + 1]}
    resent = {m.command.target.name: m.command for m in report.replayed[LIMIT + 1 :]}
    assert {name: c.attempt for name, c in resent.items()} == {"s1": 1, "s2": 1}
    assert {name: first_attempt_id(c) for name, c in resent.items()} == first
    assert not {c.id for c in resent.values()} & set(first.values())
