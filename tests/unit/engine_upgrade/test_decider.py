"""The decider driven event by event: per-node limit and its in-flight count, grouping by owner,
expectations, recomputes on limit and default-image changes, readiness changes, event ordering."""

from __future__ import annotations

import msgspec
import pytest

from corral_bus.streams import StreamSettings
from corral_decision import Timing
from corral_engine_upgrade.core import DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.service import EngineUpgradeConfig
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING, InvalidEvent
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent, Outcome, first_attempt_id
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NEWER,
    NODES,
    NS,
    OLD,
    Clock,
    Feed,
    engine_image,
    names,
    ready_cluster,
    replica,
    result,
    setting,
    upgraded,
    volume,
)


def reasons(feed: Feed) -> dict[str, str]:
    return {e.name: e.reason for e in feed.decider.explain()}


def test_nothing_is_decided_before_every_kind_was_listed() -> None:
    clock = Clock()
    partial = EngineUpgradeDecider(clock)
    early = Feed(partial)
    early.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, "3"))
    early.put(engine_image(OLD, api=5), engine_image(NEW))
    early.volume_with_replicas(volume("v1"))
    assert partial.decide() == [] and not partial.ready
    early.resync()
    assert partial.ready
    assert names(partial.decide()) == ["v1"]


def test_replicas_seen_before_their_volume_are_kept() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock)
    feed.put(replica("v1", 0, "n2"))
    feed.put(volume("v1", state="detached"))
    assert names(decider.decide()) == ["v1"]


def test_limit_zero_or_less_or_garbage_disables() -> None:
    for value in ("0", "-1", "three", ""):
        clock = Clock()
        decider, feed = ready_cluster(clock, limit=value)
        feed.volume_with_replicas(volume("v1"))
        assert decider.decide() == []
        [explanation] = decider.explain()
        assert (explanation.reason, explanation.detail) == (Reason.DISABLED, "")


def test_gate_explanations_keep_the_per_volume_reason() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="0")
    feed.volume_with_replicas(volume("v1", robustness="degraded"))
    [explanation] = decider.explain()
    assert (explanation.reason, explanation.detail) == (Reason.DISABLED, "degraded")


def test_missing_default_engine_image_stops_everything() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock)
    feed.volume_with_replicas(volume("v1"))
    feed.put(setting(DEFAULT_IMAGE_SETTING, NEWER))  # no EngineImage for it
    assert decider.decide() == []
    assert reasons(feed) == {"v1": Reason.DEFAULT_IMAGE_MISSING}
    feed.put(setting(DEFAULT_IMAGE_SETTING, ""))
    assert reasons(feed) == {"v1": Reason.NO_DEFAULT_IMAGE}


@pytest.mark.parametrize("flaw", ["incompatible", "deleting"])
def test_a_default_image_that_is_incompatible_or_being_deleted_stops_everything(flaw: str) -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock)
    feed.volume_with_replicas(volume("v1"))
    feed.put(engine_image(NEW, **{flaw: True}))  # type: ignore[arg-type]
    assert decider.decide() == []
    [explanation] = decider.explain()
    assert (explanation.reason, explanation.detail) == (
        Reason.DEFAULT_IMAGE_UNUSABLE,
        "default-image-unusable",
    )
    feed.put(engine_image(NEW))
    assert names(decider.decide()) == ["v1"]


def test_per_node_limit_counts_in_flight_upgrades_of_that_owner() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="3")
    feed.volume_with_replicas(volume("busy-1", image=NEW, current=OLD))
    feed.volume_with_replicas(volume("busy-2", image=NEW, current=OLD))
    for name in ("c", "a", "b"):
        feed.volume_with_replicas(volume(name))
    feed.volume_with_replicas(volume("other", owner="n2"))
    assert names(decider.decide()) == ["a", "other"]  # n1: 3 - 2 in flight = 1, first by name
    assert decider.in_flight_by_node() == {"n1": 3, "n2": 1}
    assert reasons(feed)["b"] is Reason.NODE_LIMIT_REACHED


def test_grouping_is_by_owner_not_by_attached_node() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    # in flight, owned by n1 but attached to n2: it fills n1's slot, not n2's
    feed.volume_with_replicas(volume("busy", owner="n1", node="n2", image=NEW, current=OLD))
    feed.volume_with_replicas(volume("on-n1", owner="n1"))
    feed.volume_with_replicas(volume("on-n2", owner="n2"))
    feed.volume_with_replicas(volume("owned-by-n3-attached-n1", owner="n3", node="n1"))
    assert names(decider.decide()) == ["on-n2", "owned-by-n3-attached-n1"]
    assert decider.in_flight_by_node() == {"n1": 1, "n2": 1, "n3": 1}


def test_v2_volume_in_flight_still_counts_like_head() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    im_old, im_new = "longhornio/longhorn-instance-manager:a", "longhornio/longhorn-instance-manager:b"
    feed.volume_with_replicas(volume("v2", image=im_new, current=im_old, data_engine="v2"))
    feed.volume_with_replicas(volume("v1"))
    assert decider.decide() == []
    assert reasons(feed) == {"v1": Reason.NODE_LIMIT_REACHED, "v2": Reason.IN_PROGRESS}


def test_an_unobserved_command_holds_its_slot_until_the_view_shows_it() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    a, b = volume("a"), volume("b")
    feed.volume_with_replicas(a)
    feed.volume_with_replicas(b)
    [command] = decider.decide()
    assert command.target.name == "a"
    feed.put(b)  # unrelated churn while the view lags
    feed.volume_with_replicas(volume("c"))  # and a fresh candidate on the same node
    assert decider.decide() == []
    assert decider.in_flight_by_node() == {"n1": 1}
    decider.record_result(result(command, Outcome.APPLIED))
    clock.advance(DeciderConfig().timing.command_ttl + 1)  # an applied command outlives the lost-command ttl
    assert decider.decide() == []
    feed.put(upgraded(a))  # the view shows spec.image: now counted as a Longhorn in-progress upgrade
    assert decider.decide() == [] and decider.pending_commands() == 0
    assert decider.in_flight_by_node() == {"n1": 1}
    feed.put(upgraded(a, done=True))
    assert names(decider.decide()) == ["b"]


def test_an_applied_command_the_view_never_shows_is_freed_after_applied_ttl() -> None:
    clock = Clock()
    config = DeciderConfig(timing=Timing(command_ttl=10, applied_ttl=100))
    decider, feed = ready_cluster(clock, limit="1", config=config)
    feed.volume_with_replicas(volume("a"))
    feed.volume_with_replicas(volume("b"))
    [command] = decider.decide()
    decider.record_result(result(command, Outcome.APPLIED))
    clock.advance(99)
    assert decider.decide() == []
    clock.advance(2)
    due = decider.next_due()
    assert due is not None and due <= clock.now
    [again] = decider.decide()  # still on the old image in view: decided again, its next attempt
    assert (first_attempt_id(again), again.attempt) == (command.id, 1)
    assert again.id != command.id, "an id of its own: LH_COMMANDS' dedup window does not drop it"


def test_a_lost_command_is_freed_after_command_ttl_and_reissued_as_its_next_attempt() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=DeciderConfig(timing=Timing(command_ttl=30)))
    feed.volume_with_replicas(volume("a"))
    [first] = decider.decide()
    clock.advance(29)
    assert decider.decide() == []
    assert decider.next_due() == 1030.0
    clock.advance(1)
    [again] = decider.decide()
    assert (first_attempt_id(again), again.attempt) == (first.id, 1)
    assert again.id != first.id


@pytest.mark.parametrize(
    "outcome", [Outcome.PRECONDITION_FAILED, Outcome.NOT_FOUND, Outcome.REJECTED_BY_POLICY, Outcome.ERROR]
)
def test_a_refusal_frees_the_slot_and_waits_for_fresh_state(outcome: Outcome) -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=DeciderConfig(timing=Timing(retry_backoff=50)))
    a = volume("a")
    feed.volume_with_replicas(a)
    feed.volume_with_replicas(volume("b"))
    [command] = decider.decide()
    decider.record_result(result(command, outcome))
    assert names(decider.decide()) == ["b"]  # the slot went to the next candidate
    assert reasons(feed)["a"] is Reason.RETRY_BACKOFF
    # fresh state for `a` (a newer resourceVersion) ends the wait at once
    feed.put(volume("b", image=NEW, current=NEW))
    feed.put(a)
    assert names(decider.decide()) == ["a"]


def test_a_refusal_without_fresh_state_is_retried_after_the_backoff() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=DeciderConfig(timing=Timing(retry_backoff=50)))
    feed.volume_with_replicas(volume("a"))
    [command] = decider.decide()
    decider.record_result(result(command, Outcome.PRECONDITION_FAILED))
    assert decider.decide() == []
    clock.advance(49)
    assert decider.decide() == []
    clock.advance(1)
    assert names(decider.decide()) == ["a"]


def test_a_write_the_api_server_failed_is_retried_after_the_error_backoff() -> None:
    clock = Clock()
    timing = Timing(retry_backoff=50, error_backoff=5)
    decider, feed = ready_cluster(clock, limit="1", config=DeciderConfig(timing=timing))
    feed.volume_with_replicas(volume("a"))
    [command] = decider.decide()
    decider.record_result(result(command, Outcome.ERROR))
    clock.advance(4)
    assert decider.decide() == []
    clock.advance(1)
    [again] = decider.decide()
    assert again.target.name == "a" and again.attempt == 1


def test_a_refusal_after_fresher_state_was_seen_is_redecided_at_once() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    a = volume("a")
    feed.volume_with_replicas(a)
    [command] = decider.decide()
    feed.put(a)  # the view moved on before the result came back
    decider.record_result(result(command, Outcome.PRECONDITION_FAILED))
    assert names(decider.decide()) == ["a"]


def test_results_for_unknown_or_superseded_commands_change_nothing() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    feed.volume_with_replicas(volume("a"))
    feed.volume_with_replicas(volume("b"))
    [command] = decider.decide()
    stranger = command.__class__(**{**{f: getattr(command, f) for f in command.__struct_fields__}, "id": "x"})
    decider.record_result(result(stranger, Outcome.PRECONDITION_FAILED))
    decider.record_result(result(command, Outcome.APPLIED, dry_run=False))
    decider.record_result(result(command, Outcome.APPLIED))  # duplicate
    assert decider.decide() == [] and decider.in_flight_by_node() == {"n1": 1}


def test_a_dry_run_result_frees_the_slot() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    feed.volume_with_replicas(volume("a"))
    feed.volume_with_replicas(volume("b"))
    [command] = decider.decide()
    decider.record_result(result(command, Outcome.APPLIED, dry_run=True))
    assert names(decider.decide()) == ["b"]


def test_deleting_a_volume_frees_its_slot_and_is_never_resurrected() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    a = volume("a")
    feed.volume_with_replicas(a)
    feed.volume_with_replicas(volume("b"))
    [command] = decider.decide()
    stale = feed.event(a)  # an event from before the deletion, delivered after it
    feed.delete(a)
    assert names(decider.decide()) == ["b"]
    decider.apply(stale)
    assert decider.view.volume(NS, "a") is None
    decider.record_result(result(command, Outcome.NOT_FOUND))
    assert decider.in_flight_by_node() == {"n1": 1}


def test_older_and_duplicate_events_are_ignored() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    feed.volume_with_replicas(volume("a", image=NEW, current=OLD))
    newer = feed.event(volume("a", image=NEW, current=NEW))
    older = feed.event(volume("a", image=NEW, current=OLD), rv=newer_rv(newer) - 1)
    decider.apply(newer)
    decider.apply(older)
    decider.apply(newer)
    assert decider.in_flight_by_node() == {}


def newer_rv(event: ObjectEvent[object]) -> int:
    return int(event.resource_version)


def test_raising_the_limit_fills_the_new_slots_and_lowering_it_rolls_nothing_back() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    for i in range(6):
        feed.volume_with_replicas(volume(f"v{i}"))
    assert names(decider.decide()) == ["v0"]
    feed.put(setting(LIMIT_SETTING, "4"))
    assert names(decider.decide()) == ["v1", "v2", "v3"]
    feed.put(setting(LIMIT_SETTING, "1"))
    assert decider.decide() == []
    assert decider.in_flight_by_node() == {"n1": 4}
    feed.put(setting(LIMIT_SETTING, "0"))
    assert decider.decide() == []


def test_a_new_default_image_recomputes_every_volume() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="5")
    feed.volume_with_replicas(volume("on-new", image=NEW))
    feed.volume_with_replicas(volume("on-old"))
    feed.volume_with_replicas(volume("moving", image=NEW, current=OLD))
    assert names(decider.decide()) == ["on-old"]
    assert reasons(feed)["on-new"] is Reason.ALREADY_DEFAULT
    feed.put(engine_image(NEWER, api=7, api_min=5))
    feed.put(setting(DEFAULT_IMAGE_SETTING, NEWER))
    # on-old's command is still pending; on-new (API 6 ≥ 5) can now go live to NEWER
    assert names(decider.decide()) == ["on-new"]
    assert reasons(feed)["moving"] is Reason.IN_PROGRESS


def test_default_image_becoming_ready_on_a_node_re_evaluates_the_volumes_there() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="5")
    feed.put(engine_image(NEW, nodes={"n1": True, "n2": True, "n3": False}))
    feed.volume_with_replicas(volume("uses-n3"))
    feed.volume_with_replicas(volume("n1-n2-only"), nodes=("n1", "n2"))
    assert names(decider.decide()) == ["n1-n2-only"]
    assert reasons(feed)["uses-n3"] is Reason.DEFAULT_IMAGE_NOT_READY
    feed.put(engine_image(NEW, state="deploying", nodes={"n1": True, "n2": True, "n3": True}))
    assert names(decider.decide()) == ["uses-n3"]  # `deploying` is a ready state; the node map decides


def test_current_image_readiness_and_api_changes_re_evaluate_its_users() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="5")
    feed.put(engine_image(OLD, api=3, api_min=3))
    feed.volume_with_replicas(volume("live"))
    assert reasons(feed)["live"] is Reason.INCOMPATIBLE_CONTROLLER_API
    feed.put(engine_image(OLD, api=4, api_min=3))
    assert names(decider.decide()) == ["live"]
    feed.volume_with_replicas(volume("offline", state="detached"))
    feed.put(engine_image(OLD, api=4, api_min=3, nodes={"n1": True, "n2": False, "n3": True}))
    assert reasons(feed)["offline"] is Reason.IMAGE_NOT_READY
    feed.put(engine_image(OLD, api=4, api_min=3, state="", nodes={n: True for n in NODES}))
    assert reasons(feed)["offline"] is Reason.IMAGE_NOT_READY  # neither deployed nor deploying
    feed.put(engine_image(OLD, api=4, api_min=3))
    assert names(decider.decide()) == ["offline"]


def test_a_replica_moving_to_a_node_without_the_image_holds_its_volume_back() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="5")
    feed.put(engine_image(OLD, api=5, nodes={"n1": True, "n2": True, "n3": True, "n4": True}))
    feed.put(engine_image(NEW, nodes={"n1": True, "n2": True, "n3": True, "n4": False}))
    feed.volume_with_replicas(volume("v", state="detached"), nodes=("n1", "n2"))
    feed.put(replica("v", 1, "n4"))
    assert reasons(feed)["v"] is Reason.DEFAULT_IMAGE_NOT_READY
    feed.delete(replica("v", 1, "n4"))
    assert names(decider.decide()) == ["v"]


def test_commands_come_out_in_a_deterministic_order() -> None:
    outputs = []
    for order in (["b", "a", "c"], ["c", "b", "a"]):
        clock = Clock()
        decider, feed = ready_cluster(clock, limit="2")
        for name in order:
            feed.volume_with_replicas(volume(name, owner="n2" if name == "c" else "n1"))
        outputs.append([(c.id, c.target.name) for c in decider.decide()])
    assert outputs[0] == outputs[1]
    assert [name for _, name in outputs[0]] == ["a", "b", "c"]


def test_live_upgrades_take_free_slots_before_offline_ones() -> None:
    # pick_order.py: an attached volume (a live upgrade, the long kind) goes first, whatever its name
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="2")
    for name in ("a-off", "b-off", "c-live", "d-off", "e-live"):
        state = "attached" if name.endswith("live") else "detached"
        feed.volume_with_replicas(volume(name, state=state))
    assert names(decider.decide()) == ["c-live", "e-live"]
    feed.put(upgraded(volume("c-live"), NEW, done=True))
    assert names(decider.decide()) == ["a-off"]


def test_a_waiting_volume_that_attaches_moves_ahead_and_one_that_detaches_back() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    feed.volume_with_replicas(volume("a", state="attached"))
    for name in ("b", "c", "d"):
        feed.volume_with_replicas(volume(name, state="detached"))
    assert names(decider.decide()) == ["a"]  # b, c and d wait: judged, queued as offline
    feed.put(volume("d", state="attached"))
    feed.put(upgraded(volume("a"), NEW, done=True))
    assert names(decider.decide()) == ["d"]
    feed.put(volume("b", state="attached"))
    feed.put(volume("b", state="detached"))  # back to offline: name order again, b before c
    feed.put(upgraded(volume("d", state="attached"), NEW, done=True))
    assert names(decider.decide()) == ["b"]


def test_bad_events_raise_a_clear_error_and_change_nothing() -> None:
    clock = Clock()
    decider, _ = ready_cluster(clock)
    with pytest.raises(InvalidEvent, match="volume"):
        decider.apply(ObjectEvent(type=EventType.ADDED, kind="volume", namespace=NS, name="x", object=None))
    with pytest.raises(InvalidEvent, match="x"):
        decider.apply(
            ObjectEvent(type=EventType.ADDED, kind="volume", namespace=NS, name="x", object={"metadata": 3})
        )
    assert decider.view.volume_count == 0
    # objects may also arrive as plain JSON mappings (ObjectEvent[Any])
    decider.apply(
        ObjectEvent(
            type=EventType.ADDED,
            kind="Volume",
            namespace=NS,
            name="x",
            resource_version="999",
            object={"metadata": {"name": "x"}, "spec": {"image": OLD}, "status": {"currentImage": OLD}},
        )
    )
    assert decider.view.volume_count == 1


def test_a_deleted_engine_image_is_not_resurrected_by_a_late_event() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock)
    feed.volume_with_replicas(volume("v1"))
    late = feed.event(engine_image(NEW))
    feed.delete(engine_image(NEW))
    decider.apply(late)
    assert decider.decide() == []
    assert reasons(feed) == {"v1": Reason.DEFAULT_IMAGE_MISSING}
    feed.put(engine_image(NEW))  # re-created: a newer resourceVersion
    assert names(decider.decide()) == ["v1"]


def test_catch_up_makes_candidate_counts_exact_after_a_new_default_image() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    for i in range(12):
        feed.volume_with_replicas(volume(f"v{i:02d}", owner=NODES[i % 3], image=NEW))
    assert decider.decide() == []  # all on the default already
    feed.put(engine_image(NEWER, api=7, api_min=5))
    feed.put(setting(DEFAULT_IMAGE_SETTING, NEWER))
    assert names(decider.decide()) == ["v00", "v01", "v02"]  # the first of each owner node, by name
    assert decider.unclassified() > 0  # the rest is judged lazily …
    while decider.catch_up(budget=2):
        pass
    assert decider.unclassified() == 0  # … or on demand
    assert decider.candidates_by_node() == {"n1": 3, "n2": 3, "n3": 3}
    assert decider.in_flight_by_node() == {"n1": 1, "n2": 1, "n3": 1}


def test_a_retry_after_the_back_off_is_not_dropped_as_a_duplicate_command() -> None:
    """A refused or expired command is re-decided after `retry_backoff` with the same deterministic
    id when nothing changed; LH_COMMANDS must have forgotten the first by then, or JetStream would
    drop the retry and the volume would wait for another TTL round."""
    assert StreamSettings().commands_dedup_window < EngineUpgradeConfig().retry_backoff_s


def _at_generation(vol: lh.Volume, generation: int) -> lh.Volume:
    return msgspec.structs.replace(vol, metadata=msgspec.structs.replace(vol.metadata, generation=generation))


def test_an_upgrade_rolled_back_mid_flight_is_decided_again_as_a_new_command() -> None:
    """The explorer's engine-upgrade/rolled-back cells: an operator set spec.image back to the
    image the upgrade left while it was under way. The same upgrade decided again tests the same
    facts, so without the spec's generation it had the id of the first, applied command, and
    LH_COMMANDS dropped it as a duplicate: its slot stayed held and the node's wave halted."""
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    feed.volume_with_replicas(_at_generation(volume("a"), 1))
    feed.volume_with_replicas(_at_generation(volume("b"), 1))
    [first] = decider.decide()
    decider.record_result(result(first, Outcome.APPLIED))
    feed.put(_at_generation(upgraded(volume("a")), 2))
    assert decider.decide() == []
    feed.put(_at_generation(volume("a"), 3))  # rolled back: spec and current on OLD again
    [again] = decider.decide()
    assert again.target.name == "a" and again.id != first.id
