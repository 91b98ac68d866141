"""The upgrade CRs' admission rules (longhorn-behaviour.md §5.3), one test per rule and message."""

from __future__ import annotations

from typing import Any

import pytest

from corral_v2admission import MANAGERS, NODE_UPGRADES, Denial, KnownFacts, admit, condition_true

TWO_NODES = KnownFacts(upgrading={"node-1": False, "node-2": False})


def manager(engine: str | None = "v2", nodes: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "upgrade"}, "spec": dict(spec)}
    if engine is not None:
        body["spec"]["dataEngine"] = engine
    if nodes is not None:
        body["spec"]["nodes"] = nodes
    return body


def node_upgrade(**overrides: Any) -> dict[str, Any]:
    spec = {
        "nodeID": "node-1",
        "dataEngine": "v2",
        "instanceManagerImage": "longhornio/longhorn-instance-manager:v1.10.1",
        "dataEngineUpgradeManager": "upgrade",
        "snapshotBeforeUpgrade": False,
    }
    spec.update(overrides)
    return {
        "metadata": {"name": "upgrade-node-1-0a1b2c3d"},
        "spec": {k: v for k, v in spec.items() if v is not None},
    }


def create_manager(body: dict[str, Any], facts: KnownFacts = TWO_NODES) -> Denial | None:
    return admit(MANAGERS, "CREATE", None, body, facts)


def test_a_v2_manager_on_two_nodes_is_admitted() -> None:
    assert create_manager(manager()) is None


@pytest.mark.parametrize("state", ["", "initializing", "upgrading"])
def test_a_second_manager_while_one_is_active_is_a_bad_request(state: str) -> None:
    denial = create_manager(manager(), KnownFacts(managers={"first": state}, upgrading=TWO_NODES.upgrading))
    assert denial == Denial(400, "BadRequest", "another dataEngineUpgradeManager is in progress")


@pytest.mark.parametrize("state", ["completed", "error"])
def test_a_finished_manager_does_not_block_the_next(state: str) -> None:
    facts = KnownFacts(managers={"first": state}, upgrading=TWO_NODES.upgrading)
    assert create_manager(manager(), facts) is None


def test_a_single_node_cluster_is_refused() -> None:
    denial = create_manager(manager(), KnownFacts(upgrading={"node-1": False}))
    assert denial == Denial(
        422, "Invalid", "single-node cluster is not supported for data engine live upgrade"
    )


def test_the_active_manager_is_checked_before_the_node_count() -> None:
    denial = create_manager(manager(), KnownFacts(managers={"first": "upgrading"}, upgrading={"n": False}))
    assert denial is not None and denial.code == 400


@pytest.mark.parametrize(("engine", "shown"), [("v1", "v1"), (None, "")])
def test_a_manager_for_another_engine_is_refused(engine: str | None, shown: str) -> None:
    denial = create_manager(manager(engine))
    assert denial == Denial(
        422,
        "Invalid",
        f"data engine {shown} is not supported for data engine live upgrade",
        "spec.dataEngine",
    )


def test_a_start_time_must_be_rfc3339() -> None:
    assert create_manager(manager(startTime="2026-11-25T13:00:00Z")) is None
    denial = create_manager(manager(startTime="tomorrow"))
    assert denial is not None and denial.field == "spec.startTime"
    assert denial.message == "spec.startTime tomorrow is not an RFC 3339 time"


def test_manager_update_keeps_the_engine_v2() -> None:
    denial = admit(MANAGERS, "UPDATE", manager(), manager("v1"), TWO_NODES)
    assert (
        denial is not None
        and denial.message == "data engine v1 is not supported for data engine live upgrade"
    )


def test_manager_data_engine_is_immutable() -> None:
    denial = admit(MANAGERS, "UPDATE", manager("v1"), manager("v2"), TWO_NODES)
    assert denial == Denial(422, "Invalid", "spec.dataEngine field is immutable", "spec.dataEngine")


@pytest.mark.parametrize(
    ("before", "after"),
    [(None, ["node-1"]), (["node-1"], ["node-2"]), (["node-1", "node-2"], ["node-2", "node-1"]), (["a"], [])],
)
def test_manager_nodes_are_immutable_as_a_list(before: list[str] | None, after: list[str]) -> None:
    denial = admit(MANAGERS, "UPDATE", manager(nodes=before), manager(nodes=after), TWO_NODES)
    assert denial == Denial(422, "Invalid", "nodes field is immutable", "spec.nodes")


def test_manager_update_of_other_fields_is_admitted() -> None:
    """An absent list and an empty one are the same nodes; the start time may still move."""
    old, new = manager(nodes=None), manager(nodes=[], startTime="2026-11-25T13:00:00+01:00")
    new["metadata"]["labels"] = {"team": "storage"}
    assert admit(MANAGERS, "UPDATE", old, new, TWO_NODES) is None


def test_a_complete_node_upgrade_is_admitted() -> None:
    assert admit(NODE_UPGRADES, "CREATE", None, node_upgrade(), KnownFacts()) is None


@pytest.mark.parametrize("missing", ["nodeID", "instanceManagerImage", "dataEngineUpgradeManager"])
def test_node_upgrade_required_fields(missing: str) -> None:
    denial = admit(NODE_UPGRADES, "CREATE", None, node_upgrade(**{missing: None}), KnownFacts())
    assert denial == Denial(422, "Invalid", f"{missing} is required", f"spec.{missing}")


@pytest.mark.parametrize("engine", ["v1", None])
def test_node_upgrade_must_be_v2(engine: str | None) -> None:
    denial = admit(NODE_UPGRADES, "CREATE", None, node_upgrade(dataEngine=engine), KnownFacts())
    assert denial is not None and denial.field == "spec.dataEngine"
    assert denial.message == f"data engine {engine or ''} is not supported for data engine live upgrade"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nodeID", "node-2"),
        ("dataEngine", "v1"),
        ("instanceManagerImage", "longhornio/longhorn-instance-manager:v1.10.2"),
        ("dataEngineUpgradeManager", "other"),
        ("snapshotBeforeUpgrade", True),
    ],
)
def test_node_upgrade_spec_is_immutable(field: str, value: Any) -> None:
    denial = admit(NODE_UPGRADES, "UPDATE", node_upgrade(), node_upgrade(**{field: value}), KnownFacts())
    assert denial == Denial(422, "Invalid", f"{field} field is immutable", f"spec.{field}")


def test_node_upgrade_metadata_update_is_admitted() -> None:
    """Finalizer and label writes (and an absent snapshot flag reading as false) pass."""
    old, new = node_upgrade(snapshotBeforeUpgrade=None), node_upgrade()
    new["metadata"]["finalizers"] = ["longhorn.io"]
    assert admit(NODE_UPGRADES, "UPDATE", old, new, KnownFacts()) is None


def test_deletes_are_not_judged() -> None:
    assert admit(MANAGERS, "DELETE", manager(), None, KnownFacts()) is None


def test_the_upgrade_condition_reads_from_a_list_or_a_map() -> None:
    listed = {"status": {"conditions": [{"type": "DataEngineUpgradeRequested", "status": "True"}]}}
    mapped = {"status": {"conditions": {"DataEngineUpgradeRequested": {"status": "True"}}}}
    false = {"status": {"conditions": [{"type": "DataEngineUpgradeRequested", "status": "False"}]}}
    assert condition_true(listed) and condition_true(mapped)
    assert not condition_true(false) and not condition_true({"status": None}) and not condition_true({})
