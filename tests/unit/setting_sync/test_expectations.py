"""setting-sync's commands as expectations: never the same change twice while one is out, a
refusal waits for a fresher object (or the backoff), a lost command is sent again after its TTL,
another replica's command is adopted, and a volume event re-judges nothing but the precondition."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_dangerzone.table import SettingName
from corral_model import longhorn as lh
from corral_model.envelopes import (
    Command,
    CommandResult,
    EventType,
    FieldValue,
    ObjectEvent,
    Outcome,
    Verb,
    first_attempt_id,
)
from corral_setting_sync import components, core
from tests.unit.setting_sync.cluster import Cluster, component_pod, setting, volume, workload


def cluster_with_pending_delete() -> tuple[Cluster, Command]:
    cluster = Cluster()
    cluster.put(component_pod("instance-manager-n1"), setting("priority-class", "high", applied=False))
    cluster.resync()
    [delete] = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    return cluster, delete


def result(command: Command, outcome: Outcome) -> CommandResult:
    return CommandResult(
        command_id=command.id, service=command.service, target=command.target, outcome=outcome
    )


def test_one_delete_while_it_is_out() -> None:
    cluster, delete = cluster_with_pending_delete()
    assert cluster.decide() == []
    cluster.decider.record_result(result(delete, Outcome.APPLIED))
    cluster.put(volume("pvc-a"))  # unrelated events
    assert cluster.decide() == []
    assert [p.command_id for p in cluster.decider.expectations()] == [delete.id]


def test_a_refused_delete_waits_for_a_fresher_pod_or_the_backoff() -> None:
    cluster, delete = cluster_with_pending_delete()
    cluster.decider.record_result(result(delete, Outcome.PRECONDITION_FAILED))
    assert cluster.decide() == []  # same pod, same resourceVersion: not again yet
    cluster.now += cluster.decider.config.timing.retry_backoff
    [again] = cluster.decide()
    assert (first_attempt_id(again), again.attempt) == (delete.id, 1)
    cluster.decider.record_result(result(again, Outcome.PRECONDITION_FAILED))
    cluster.put(cluster.get("pod", "instance-manager-n1"))  # a fresher version of the pod
    [fresh] = cluster.decide()
    assert fresh.verb is Verb.DELETE and fresh.id != delete.id


def test_a_lost_command_is_sent_again_after_its_ttl() -> None:
    cluster, delete = cluster_with_pending_delete()
    cluster.now += cluster.decider.config.timing.command_ttl - 1
    assert cluster.decide() == []
    assert cluster.decider.next_due() == pytest.approx(1000.0 + cluster.decider.config.timing.command_ttl)
    cluster.now += 1
    [again] = cluster.decide()
    assert (first_attempt_id(again), again.attempt) == (delete.id, 1)


def test_another_replicas_command_is_adopted_only_while_it_can_apply() -> None:
    pod, priority = component_pod("instance-manager-n1"), setting("priority-class", "high")
    leader, twin = Cluster(), Cluster()
    for replica in (leader, twin):  # the same events: the same view
        replica.put(pod, priority)
        replica.resync()
    [delete] = [c for c in leader.decide() if c.verb is Verb.DELETE]
    assert twin.decider.adopt(delete, None) is True
    assert twin.decider.adopt(delete, None) is False  # idempotent
    assert [c for c in twin.decide() if c.verb is Verb.DELETE] == []
    older = tuple(
        FieldValue(path=p.path, value="1") if p.path == "/metadata/resourceVersion" else p
        for p in delete.preconditions
    )
    stale = msgspec.structs.replace(delete, id="setting-sync-stale", preconditions=older)
    assert twin.decider.may_adopt(stale) is False


def test_volume_events_rejudge_no_component(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    cluster.put(
        workload(lh.Deployment, "csi-attacher"),
        *(component_pod(f"instance-manager-n{i}") for i in range(20)),
        setting("taint-toleration", "k:NoSchedule"),
        volume("pvc-a", "attached"),
    )
    cluster.resync()
    cluster.carry_out(cluster.decide())
    judged: list[object] = []
    real = components.lagging

    def counting(*args: Any) -> frozenset[SettingName]:
        judged.append(args)
        return real(*args)

    monkeypatch.setattr(core, "lagging", counting)
    for i in range(50):
        cluster.put(volume(f"pvc-{i}", "attached"), volume(f"pvc-{i}", "detached"))
        assert cluster.decide() == []
    assert judged == []
    cluster.put(volume("pvc-a", "detached"))  # the precondition holds: the pods lagging get their deletes
    assert len([c for c in cluster.decide() if c.verb is Verb.DELETE]) == 20
    assert judged == []
    cluster.put(component_pod("instance-manager-new"))  # a component event is judged (the counter works)
    assert len(judged) == 1


def test_an_older_event_delivered_late_does_not_take_the_view_back() -> None:
    """The explorer's setting-sync/*/out-of-order-events cells: the setting's oldest stored event
    arrived after its newest. Applied, it put the old value back in the view, the pods counted as
    carrying it, and nothing was ever applied (the newest event is not sent again)."""
    cluster = Cluster()
    cluster.put(component_pod("instance-manager-n1"), setting("priority-class", "", applied=True))
    cluster.resync()
    old = cluster.get("setting", "priority-class")
    cluster.put(setting("priority-class", "high", applied=False))
    cluster.decider.apply(
        ObjectEvent(
            type=EventType.MODIFIED,
            kind="setting",
            namespace=old.metadata.namespace,
            name="priority-class",
            uid=old.metadata.uid,
            resource_version=old.metadata.resource_version,
            object=old,
        )
    )
    assert [c.target.name for c in cluster.decide() if c.verb is Verb.DELETE] == ["instance-manager-n1"]
