"""The blast-radius guard (issue 30, item 2): a wave whose volumes fail or get stuck on the new image
pauses cluster-wide at the threshold, says so on the default EngineImage and in an Event, lets the
upgrades in flight finish, and resumes on the operator's annotation."""

from __future__ import annotations

import msgspec

from corral_engine_upgrade.core import DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import WAVE_PAUSED, WAVE_RESUMED
from corral_engine_upgrade.stuck import StuckBounds
from corral_engine_upgrade.wave_guard import PAUSED_EVENT, PAUSED_PATH, WaveGuardConfig
from corral_model import longhorn as lh
from corral_model.envelopes import Command, Outcome
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NODES,
    Clock,
    Feed,
    engine_image,
    ready_cluster,
    result,
    upgraded,
    volume,
)

CONFIG = DeciderConfig(
    announce=True,
    stuck=StuckBounds(live=100.0, offline=100.0),
    wave_guard=WaveGuardConfig(max_failed=2, max_failed_share=1.0),
)


def upgrades(commands: list[Command]) -> list[str]:
    return sorted(c.target.name for c in commands if c.target.kind == "Volume")


def marks(commands: list[Command]) -> list[Command]:
    return [c for c in commands if c.target.kind == "EngineImage"]


def wave_events(commands: list[Command]) -> list[str]:
    return [
        c.body["message"]
        for c in commands
        if c.target.kind == "Event" and c.body is not None and c.body["reason"] == PAUSED_EVENT
    ]


def start(decider: EngineUpgradeDecider, feed: Feed, count: int) -> list[lh.Volume]:
    """`count` volumes per node, each node's first upgrade commanded and landed."""
    vols = [volume(f"v{n}-{i}", owner=n) for n in NODES for i in range(count)]
    for vol in vols:
        feed.volume_with_replicas(vol)
    started = upgrades(decider.decide())
    assert started == [f"v{n}-0" for n in NODES]
    feed.put(*(upgraded(v) for v in vols if v.metadata.name in started))
    return vols


def annotated(ei: lh.EngineImage, **annotations: str) -> lh.EngineImage:
    meta = msgspec.structs.replace(ei.metadata, annotations={**ei.metadata.annotations, **annotations})
    return msgspec.structs.replace(ei, metadata=meta)


def test_the_wave_pauses_at_the_threshold_and_in_flight_upgrades_finish() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    vols = start(decider, feed, 2)
    feed.put(
        msgspec.structs.replace(
            upgraded(vols[0]), status=msgspec.structs.replace(vols[0].status, robustness="faulted")
        )
    )  # vn1-0 failed on the new image: one, below the count
    assert decider.wave_paused() == "" and marks(decider.decide()) == []

    clock.advance(100)  # n2-0 and n3-0 stuck: the second failure reaches the count of 2
    commands = decider.decide()
    assert upgrades(commands) == []
    (mark,) = marks(commands)
    assert mark.target.name == lh.engine_image_name(NEW) and mark.changes[0].path == PAUSED_PATH
    assert [(p.path, p.value) for p in mark.preconditions] == [("/spec/image", NEW)]
    reason = str(mark.changes[0].value)
    assert "2 of 3 volumes of the wave to" in reason and "stuck (in flight 100s" in reason
    (message,) = wave_events(commands)
    assert (
        message.startswith("automatic engine upgrade paused: ") and "corral engine-upgrade resume" in message
    )
    assert decider.wave_paused() == reason
    # the pause stands; failures past it are still counted (vn3-0 got stuck in the same pass)
    assert set(decider.wave_failures()) == {f"longhorn-system/v{n}-0" for n in NODES}

    # the in-flight ones finish; nothing new starts, and the candidates say why
    feed.put(*(upgraded(v, done=True) for v in vols if v.metadata.name in ("vn2-0", "vn3-0")))
    assert upgrades(decider.decide()) == []
    (why,) = decider.explain("Volume/longhorn-system/vn2-1")
    assert why.reason == Reason.WAVE_PAUSED and why.detail == reason

    # the operator resumes: the annotations as corral and then `corral engine-upgrade resume` wrote them
    pause_id = reason.split(":", 1)[0]
    feed.put(annotated(engine_image(NEW), **{WAVE_PAUSED: reason}))
    assert decider.wave_paused() == reason and upgrades(decider.decide()) == []
    feed.put(annotated(engine_image(NEW), **{WAVE_PAUSED: reason, WAVE_RESUMED: pause_id}))
    assert decider.wave_paused() == ""
    assert upgrades(decider.decide()) == ["vn2-1", "vn3-1"]  # n1's slot is still held by vn1-0


def test_one_failure_below_the_threshold_does_not_pause() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    vols = start(decider, feed, 2)
    feed.put(upgraded(vols[0], done=True))  # vn1-0 done …
    faulted = msgspec.structs.replace(
        upgraded(vols[0], done=True),
        status=msgspec.structs.replace(vols[0].status, current_image=NEW, robustness="faulted"),
    )
    feed.put(faulted)  # … then faulted: it counts, as one
    feed.put(*(upgraded(v, done=True) for v in vols if v.metadata.name in ("vn2-0", "vn3-0")))
    assert decider.wave_failures() == {"longhorn-system/vn1-0": "faulted"}
    assert decider.wave_paused() == ""
    assert upgrades(decider.decide()) == ["vn1-1", "vn2-1", "vn3-1"]


def test_a_volume_that_upgraded_and_then_faulted_counts_toward_the_pause() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    vols = start(decider, feed, 2)
    for vol in vols:
        if vol.metadata.name in ("vn1-0", "vn2-0"):
            done = upgraded(vol, done=True)
            feed.put(done)
            feed.put(
                msgspec.structs.replace(
                    done, status=msgspec.structs.replace(done.status, robustness="faulted")
                )
            )
    commands = decider.decide()
    assert upgrades(commands) == [] and len(marks(commands)) == 1
    assert decider.wave_failures() == {
        "longhorn-system/vn1-0": "faulted",
        "longhorn-system/vn2-0": "faulted",
    }


def test_a_share_of_the_wave_pauses_it_once_the_wave_is_large_enough() -> None:
    clock = Clock()
    config = DeciderConfig(wave_guard=WaveGuardConfig(max_failed=0, max_failed_share=0.1))
    decider, feed = ready_cluster(clock, limit="4", config=config)
    vols = [volume(f"v{n}-{i}", owner=n) for n in NODES for i in range(5)]
    for vol in vols:
        feed.volume_with_replicas(vol)
    started = upgrades(decider.decide())
    assert len(started) == 12
    feed.put(*(upgraded(v) for v in vols if v.metadata.name in started))
    first = next(v for v in vols if v.metadata.name == started[0])
    feed.put(
        msgspec.structs.replace(
            upgraded(first), status=msgspec.structs.replace(first.status, robustness="faulted")
        )
    )
    assert decider.wave_paused() == ""  # 1 of 12 is below 10 %
    second = next(v for v in vols if v.metadata.name == started[1])
    feed.put(
        msgspec.structs.replace(
            upgraded(second), status=msgspec.structs.replace(second.status, robustness="degraded")
        )
    )
    assert "2 of 12 volumes" in decider.wave_paused()


def test_a_pause_nobody_resumed_holds_after_a_restart() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    feed.put(annotated(engine_image(NEW), **{WAVE_PAUSED: "123: a bad image"}))
    feed.volume_with_replicas(volume("v1"))
    assert upgrades(decider.decide()) == []
    assert decider.wave_paused() == "123: a bad image"
    feed.put(annotated(engine_image(NEW), **{WAVE_PAUSED: "123: a bad image", WAVE_RESUMED: "123"}))
    assert upgrades(decider.decide()) == ["v1"]


def paused_by_two_faults(clock: Clock) -> tuple[EngineUpgradeDecider, Feed, Command]:
    """vn1-0 and vn2-0 upgraded and faulted: the wave pauses; its mark, as first sent."""
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    for vol in start(decider, feed, 2)[0:4:2]:
        done = upgraded(vol, done=True)
        status = msgspec.structs.replace(done.status, robustness="faulted")
        feed.put(msgspec.structs.replace(done, status=status))
    (mark,) = marks(decider.decide())
    return decider, feed, mark


def test_a_refused_pause_mark_is_sent_again_after_the_backoff() -> None:
    clock = Clock()
    decider, _, mark = paused_by_two_faults(clock)
    decider.record_result(result(mark, Outcome.ERROR))
    assert marks(decider.decide()) == []  # held back
    clock.advance(decider.config.timing.retry_backoff)
    (again,) = marks(decider.decide())
    assert again.changes == mark.changes and decider.wave_paused() == mark.changes[0].value
    assert again.attempt == 1 and again.id != mark.id  # not dropped as a duplicate of the first
    assert wave_events(decider.decide()) == []  # the Event was said once


def test_a_lost_pause_mark_is_sent_again_at_its_ttl_and_a_shown_one_never() -> None:
    clock = Clock()
    decider, feed, mark = paused_by_two_faults(clock)
    clock.advance(decider.config.timing.command_ttl - 1)
    assert marks(decider.decide()) == []
    clock.advance(1)  # no result, the view does not show it: presumed lost
    (again,) = marks(decider.decide())
    feed.put(annotated(engine_image(NEW), **{WAVE_PAUSED: str(mark.changes[0].value)}))
    clock.advance(decider.config.timing.applied_ttl)
    assert marks(decider.decide()) == []  # shown: settled, never sent again
    assert again.changes == mark.changes
