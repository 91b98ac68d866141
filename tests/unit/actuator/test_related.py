"""Preconditions on related objects (corral_actuator.related): what breaks one, and how the result
names it."""

from __future__ import annotations

from typing import Any

from corral_actuator.related import broken_in, busy_entry
from corral_decision.pod_delete import idle_instance_manager
from corral_model import longhorn as lh
from corral_model.envelopes import FieldValue, NoneInStates, RelatedPrecondition, Target

IM = lh.InstanceManager(metadata=lh.ObjectMeta(name="im-1", namespace="longhorn-system", uid="u-1"))
IDLE = idle_instance_manager(IM)


def document(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "im-1", "namespace": "longhorn-system", "uid": "u-1"}, "status": status}


def test_an_idle_instance_manager_holds() -> None:
    assert broken_in(document(), IDLE) is None
    assert broken_in(document(instanceEngines=None, instanceReplicas={}), IDLE) is None
    stopped = {"r-1": {"status": {"state": "stopped"}}, "r-2": {"status": {"state": "error"}}}
    assert broken_in(document(instanceReplicas=stopped), IDLE) is None


def test_a_running_or_starting_instance_breaks_it_and_is_named() -> None:
    for field in ("instanceEngines", "instanceEngineFrontends", "instanceReplicas"):
        for state in ("running", "starting"):
            busy = {"a": {"status": {"state": "stopped"}}, "b": {"status": {"state": state}}}
            why = broken_in(document(**{field: busy}), IDLE)
            assert why == (
                f"InstanceManager longhorn-system/im-1: /status/{field}/b/status/state is {state!r};"
                " none may be running or starting"
            )


def test_a_recreated_instance_manager_breaks_it() -> None:
    other = document()
    other["metadata"]["uid"] = "u-2"
    why = broken_in(other, IDLE)
    assert why is not None and "recreated" in why and "'u-2'" not in why  # which field, not its value


def test_holds_are_field_equalities() -> None:
    related = RelatedPrecondition(
        target=Target(kind="InstanceManager", namespace="longhorn-system", name="im-1"),
        holds=(FieldValue(path="/status/currentState", value="running"),),
    )
    assert broken_in(document(currentState="running"), related) is None
    why = broken_in(document(currentState="starting"), related)
    assert (
        why == "InstanceManager longhorn-system/im-1: /status/currentState: another value,"
        " not what the command expected"
    )


def test_a_map_that_is_no_map_holds_nothing() -> None:
    rule = NoneInStates(path="/status/instanceReplicas", field="/status/state", states=("running",))
    assert busy_entry(document(instanceReplicas="garbage"), rule) is None
    assert busy_entry(document(instanceReplicas={"x": "garbage"}), rule) is None
