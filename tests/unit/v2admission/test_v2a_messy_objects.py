"""Real objects are messy: whatever shape an object arrives in (nulls, lists where maps belong,
numbers for strings), the rules answer allowed or a denial, never an exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_v2admission import RESOURCES, Denial, KnownFacts, admit

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 5), st.sampled_from(["", "v1", "v2", "node-1"]))
FIELDS = st.sampled_from(
    ["dataEngine", "nodeID", "targetNodeIDForLiveUpgrade", "image", "numberOfReplicas", "nodes", "startTime",
     "instanceManagerImage", "dataEngineUpgradeManager", "snapshotBeforeUpgrade", "ownerID", "name"]
)  # fmt: skip
VALUES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(FIELDS, inner, max_size=4))
)
SECTIONS = st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), VALUES, max_size=3)
OBJECTS = st.one_of(st.none(), SECTIONS)
FACTS = KnownFacts(
    managers={"m": "upgrading"}, upgrading={"node-1": True, "v2": False}, instance_manager_image="v2"
)


@settings(max_examples=300, deadline=None)
@given(
    resource=st.sampled_from(RESOURCES),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
    old=OBJECTS,
    new=OBJECTS,
)
def test_any_shape_gets_an_answer(
    resource: str, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    answer = admit(resource, operation, old, new, FACTS)
    assert answer is None or (
        isinstance(answer, Denial) and answer.message and answer.code in (400, 422, 500)
    )
