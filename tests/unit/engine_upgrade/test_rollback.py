"""A way out for a stuck volume (issue 30, item 3): where Longhorn has one (the old image still
deployed, the upgrade not switched over), the stuck volume's spec.image goes back to the image it
runs, once the operator approves (the default) or at once (`auto`); the rollback is said in an
Event, and the volume is held off the bad image while it is the default."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_engine_upgrade.core import DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import ROLLBACK_APPROVED, ROLLED_BACK
from corral_engine_upgrade.rollback import (
    AWAITING_APPROVAL,
    ROLLED_BACK_EVENT,
    ROLLED_BACK_PATH,
    RollbackMode,
)
from corral_engine_upgrade.service import EngineUpgradeConfig
from corral_engine_upgrade.stuck import STUCK_EVENT, StuckBounds
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING
from corral_model import longhorn as lh
from corral_model.envelopes import Command, Outcome
from corral_runtime.config import ConfigError, load_config
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NEWER,
    OLD,
    Clock,
    Feed,
    engine_image,
    ready_cluster,
    result,
    setting,
    upgraded,
    volume,
)

BOUNDS = StuckBounds(live=100.0, offline=100.0)


def config(mode: RollbackMode = RollbackMode.APPROVED) -> DeciderConfig:
    return DeciderConfig(announce=True, stuck=BOUNDS, rollback=mode)


def annotated(vol: lh.Volume, **annotations: str) -> lh.Volume:
    meta = msgspec.structs.replace(vol.metadata, annotations={**vol.metadata.annotations, **annotations})
    return msgspec.structs.replace(vol, metadata=meta)


def volume_commands(commands: list[Command]) -> list[Command]:
    return [c for c in commands if c.target.kind == "Volume"]


def events(commands: list[Command], reason: str) -> list[dict[str, Any]]:
    return [c.body for c in commands if c.target.kind == "Event" and c.body and c.body["reason"] == reason]


def explained(decider: EngineUpgradeDecider, name: str) -> tuple[str, str]:
    (explanation,) = decider.explain(f"Volume/longhorn-system/{name}")
    return str(explanation.reason), explanation.detail


Stuck = tuple[EngineUpgradeDecider, Feed, Clock, list[Command]]


def stuck_v1(mode: RollbackMode = RollbackMode.APPROVED) -> Stuck:
    """v1 upgraded to NEW and stuck there (named at the bound), v2 waiting on the same node (limit 1):
    the commands of the pass that named v1 stuck."""
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=config(mode))
    feed.volume_with_replicas(volume("v1"))
    feed.volume_with_replicas(volume("v2"))
    assert [c.target.name for c in volume_commands(decider.decide())] == ["v1"]
    feed.put(upgraded(volume("v1")))
    decider.decide()
    clock.advance(100)
    return decider, feed, clock, decider.decide()


def rolled_back(image: str = NEW) -> lh.Volume:
    """v1 as the view shows it once the rollback applied."""
    return annotated(volume("v1"), **{ROLLBACK_APPROVED: image, ROLLED_BACK: image})


def test_a_stuck_volume_awaits_the_operators_approval_then_is_rolled_back_to_the_image_it_runs() -> None:
    decider, feed, _, commands = stuck_v1()
    (stuck,) = events(commands, STUCK_EVENT)
    assert AWAITING_APPROVAL in stuck["message"] and "corral engine-upgrade rollback v1" in stuck["message"]
    assert volume_commands(commands) == []
    reason, detail = explained(decider, "v1")
    assert reason == Reason.STUCK and f"{AWAITING_APPROVAL}: Longhorn can roll it back to {OLD}" in detail

    # an approval of another stall approves nothing; the operator's, naming NEW, does
    feed.put(annotated(upgraded(volume("v1")), **{ROLLBACK_APPROVED: NEWER}))
    assert volume_commands(decider.decide()) == []
    feed.put(annotated(upgraded(volume("v1")), **{ROLLBACK_APPROVED: NEW}))
    (rollback,) = volume_commands(decider.decide())
    assert [(c.path, c.value) for c in rollback.changes] == [("/spec/image", OLD), (ROLLED_BACK_PATH, NEW)]
    tests = {p.path: p.value for p in rollback.preconditions}
    assert tests["/spec/image"] == NEW and tests["/status/currentImage"] == OLD
    assert tests["/metadata/uid"] == "uid-v1" and tests["/status/ownerID"] == "n1"
    assert "rolling back to" in explained(decider, "v1")[1]
    decider.record_result(result(rollback, Outcome.APPLIED))
    assert volume_commands(decider.decide()) == []  # sent once

    # the view shows it: the Event says from what to what and why; the slot is free, and v2 takes it
    feed.put(rolled_back())
    commands = decider.decide()
    (event,) = events(commands, ROLLED_BACK_EVENT)
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "v1"
    assert f"spec.image {NEW} -> {OLD}" in event["message"] and "approved by the operator" in event["message"]
    assert "in flight 100s" in event["message"]
    assert [c.target.name for c in volume_commands(commands)] == ["v2"]
    assert explained(decider, "v1")[0] == Reason.ROLLED_BACK


def test_a_rolled_back_volume_is_held_off_the_image_until_the_default_changes() -> None:
    decider, feed, clock, _ = stuck_v1()
    feed.put(annotated(upgraded(volume("v1")), **{ROLLBACK_APPROVED: NEW}))
    decider.decide()
    feed.put(rolled_back())
    feed.put(upgraded(volume("v2"), done=True))  # v2's slot upgrade came and went
    clock.advance(1000)
    assert volume_commands(decider.decide()) == []  # the slot is free: v1 is not picked again
    reason, detail = explained(decider, "v1")
    assert reason == Reason.ROLLED_BACK and f"remove the annotation {ROLLED_BACK}" in detail

    feed.put(engine_image(NEWER), setting(DEFAULT_IMAGE_SETTING, NEWER))  # a new wave: it goes
    (upgrade,) = volume_commands(decider.decide())
    assert upgrade.target.name == "v1"  # and the hold ends with it: the mark goes in the same patch
    assert [(c.path, c.value) for c in upgrade.changes] == [("/spec/image", NEWER), (ROLLED_BACK_PATH, None)]


def test_auto_rolls_back_as_soon_as_the_volume_is_named_stuck() -> None:
    _, _, _, commands = stuck_v1(RollbackMode.AUTO)
    (rollback,) = volume_commands(commands)
    assert rollback.changes[0].value == OLD and "automatic" in rollback.reason
    (stuck,) = events(commands, STUCK_EVENT)
    assert f"to be rolled back to {OLD}" in stuck["message"] and AWAITING_APPROVAL not in stuck["message"]


def test_off_never_rolls_back_and_says_nothing_of_a_way_out() -> None:
    decider, feed, _, commands = stuck_v1(RollbackMode.OFF)
    feed.put(annotated(upgraded(volume("v1")), **{ROLLBACK_APPROVED: NEW}))
    assert volume_commands(commands + decider.decide()) == []
    assert "roll" not in explained(decider, "v1")[1]


def test_no_rollback_while_the_old_image_is_not_deployed_and_one_once_it_is() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=config(RollbackMode.AUTO))
    feed.volume_with_replicas(volume("v1"))
    decider.decide()
    feed.put(upgraded(volume("v1")))
    feed.put(engine_image(OLD, api=5, state="deploying"))
    clock.advance(100)
    assert volume_commands(decider.decide()) == []
    assert f"no rollback: its old image {OLD} is not deployed" in explained(decider, "v1")[1]
    feed.put(engine_image(OLD, api=5))
    (rollback,) = volume_commands(decider.decide())
    assert rollback.changes[0].value == OLD


def test_no_rollback_for_a_degraded_attached_volume_as_longhorn_refuses_one() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=config(RollbackMode.AUTO))
    feed.volume_with_replicas(volume("v1"))
    decider.decide()
    feed.put(upgraded(volume("v1", robustness="degraded")))
    clock.advance(100)
    assert volume_commands(decider.decide()) == []
    assert "only on a healthy volume; it is degraded" in explained(decider, "v1")[1]


def test_a_refused_rollback_is_held_then_sent_again_after_the_backoff() -> None:
    decider, _, clock, commands = stuck_v1(RollbackMode.AUTO)
    (rollback,) = volume_commands(commands)
    decider.record_result(result(rollback, Outcome.PRECONDITION_FAILED))
    assert volume_commands(decider.decide()) == []
    clock.advance(decider.config.timing.retry_backoff)
    (again,) = volume_commands(decider.decide())
    assert again.changes == rollback.changes
    # The next attempt, under an id of its own: JetStream's duplicate window would drop the same id.
    assert again.attempt == 1 and again.id != rollback.id


def test_the_mode_is_a_service_setting_approved_by_default() -> None:
    assert load_config(EngineUpgradeConfig, environ={}).decider_config().rollback is RollbackMode.APPROVED
    auto = load_config(EngineUpgradeConfig, environ={"CORRAL_STUCK_ROLLBACK": "auto"})
    assert auto.decider_config().rollback is RollbackMode.AUTO
    with pytest.raises(ConfigError, match="CORRAL_STUCK_ROLLBACK"):
        load_config(EngineUpgradeConfig, environ={"CORRAL_STUCK_ROLLBACK": "sometimes"})
