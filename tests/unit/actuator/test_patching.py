"""JSON pointers and the preconditioned JSON Patches built from commands (corral_kube.patching)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from corral_kube.patching import (
    MISSING,
    PointerError,
    describe_mismatch,
    escape,
    first_not_holding,
    holds,
    json_equal,
    json_patch,
    needs_snapshot,
    pointer,
    resolve,
    subset_holds,
    tokens,
)
from corral_model.envelopes import FieldValue
from corral_sandbox.emulator.patching import PatchError
from corral_sandbox.emulator.patching import json_patch as apply_patch

VOLUME: dict[str, Any] = {
    "metadata": {
        "name": "pvc-1",
        "resourceVersion": "41",
        "labels": {"longhorn.io/component": "instance-manager"},
        "annotations": {"a~b": "x"},
    },
    "spec": {"image": "engine:v1", "nodeSelector": None, "containers": [{"name": "c0"}, {"name": "c1"}]},
    "status": {"applied": False},
}


def test_tokens_unescape_rfc6901() -> None:
    assert tokens("/metadata/labels/longhorn.io~1component") == (
        "metadata",
        "labels",
        "longhorn.io/component",
    )
    assert tokens("/metadata/annotations/a~0b") == ("metadata", "annotations", "a~b")
    assert tokens("") == ()
    assert pointer(["metadata", "labels", "a/b"]) == "/metadata/labels/a~1b"


@pytest.mark.parametrize("bad", ["spec/image", "/spec/a~2", "/spec/a~"])
def test_bad_pointers_are_refused(bad: str) -> None:
    with pytest.raises(PointerError):
        tokens(bad)


@given(st.lists(st.text(max_size=8), max_size=5))
def test_pointer_round_trip(parts: list[str]) -> None:
    assert tokens(pointer(parts)) == tuple(parts)
    assert all("/" not in escape(p) for p in parts)


def test_resolve_objects_and_arrays() -> None:
    assert resolve(VOLUME, "/spec/image") == "engine:v1"
    assert resolve(VOLUME, "/spec/containers/1/name") == "c1"
    assert resolve(VOLUME, "/spec/containers/2/name") is MISSING
    assert resolve(VOLUME, "/spec/containers/01") is MISSING  # leading zeros are not indexes
    assert resolve(VOLUME, "/metadata/annotations/a~0b") == "x"
    assert resolve(VOLUME, "/spec/image/deeper") is MISSING


def test_json_equality_keeps_bool_and_int_apart() -> None:
    assert json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal("1", 1)
    assert json_equal({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})


def test_holds_treats_none_as_absent_or_null() -> None:
    assert holds(VOLUME, FieldValue(path="/spec/image", value="engine:v1"))
    assert not holds(VOLUME, FieldValue(path="/spec/image", value="engine:v2"))
    assert holds(VOLUME, FieldValue(path="/spec/missing", value=None))
    assert holds(VOLUME, FieldValue(path="/spec/nodeSelector", value=None))
    assert not holds(VOLUME, FieldValue(path="/spec/image", value=None))
    assert not holds(VOLUME, FieldValue(path="/status/applied", value=0))
    broken = first_not_holding(
        VOLUME, [FieldValue(path="/spec/image", value="engine:v1"), FieldValue(path="/x", value=1)]
    )
    assert broken is not None and broken.path == "/x"
    # Which field, never the value an object holds (results are read by every bus reader).
    assert describe_mismatch(VOLUME, broken) == "/x: absent, not what the command expected"
    image = FieldValue(path="/spec/image", value="engine:v2")
    assert describe_mismatch(VOLUME, image) == "/spec/image: another value, not what the command expected"
    assert "engine:v1" not in describe_mismatch(VOLUME, image, expected_is_public=True)
    assert describe_mismatch(VOLUME, FieldValue(path="/spec/image", value=None)) == (
        "/spec/image: present, not what the command expected"
    )


def test_patch_without_snapshot_tests_preconditions_then_sets() -> None:
    ops = json_patch(
        [
            FieldValue(path="/spec/image", value="engine:v2"),
            FieldValue(path="/spec/containers/0/resources", value={}),
        ],
        [FieldValue(path="/spec/image", value="engine:v1")],
    )
    assert ops == [
        {"op": "test", "path": "/spec/image", "value": "engine:v1"},
        {"op": "add", "path": "/spec/image", "value": "engine:v2"},
        {"op": "add", "path": "/spec/containers/0/resources", "value": {}},
    ]


def test_setting_an_array_element_replaces_it_instead_of_inserting() -> None:
    ops = json_patch([FieldValue(path="/spec/tolerations/0", value={"key": "k"})])
    assert ops == [{"op": "replace", "path": "/spec/tolerations/0", "value": {"key": "k"}}]


def test_none_change_removes_the_field() -> None:
    assert json_patch([FieldValue(path="/spec/nodeSelector", value=None)]) == [
        {"op": "remove", "path": "/spec/nodeSelector"}
    ]


def test_absent_precondition_needs_a_snapshot() -> None:
    pre = [FieldValue(path="/metadata/annotations/x", value=None)]
    assert needs_snapshot(pre)
    with pytest.raises(ValueError, match="snapshot"):
        json_patch([FieldValue(path="/spec/image", value="e")], pre)


def test_patch_from_snapshot_tests_resource_version_and_adds_missing_parents() -> None:
    snapshot = {"metadata": {"resourceVersion": "7"}, "spec": {"template": {"spec": {}}}}
    changes = [
        FieldValue(
            path="/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations", value="[]"
        ),
        FieldValue(path="/spec/template/metadata/labels/a", value="b"),
        FieldValue(path="/spec/template/spec/priorityClassName", value="p"),
        FieldValue(path="/spec/gone", value=None),  # already absent: nothing to remove
    ]
    assert json_patch(changes, snapshot=snapshot) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/spec/template/metadata", "value": {}},
        {"op": "add", "path": "/spec/template/metadata/annotations", "value": {}},
        {
            "op": "add",
            "path": "/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations",
            "value": "[]",
        },
        {"op": "add", "path": "/spec/template/metadata/labels", "value": {}},
        {"op": "add", "path": "/spec/template/metadata/labels/a", "value": "b"},
        {"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "p"},
    ]


def test_missing_array_elements_are_not_invented() -> None:
    snapshot = {"metadata": {"resourceVersion": "7"}, "spec": {"containers": [{"name": "a"}]}}
    ops = json_patch([FieldValue(path="/spec/containers/3/resources", value={})], snapshot=snapshot)
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/spec/containers/3/resources", "value": {}},
    ]


def test_subset_holds_for_creates() -> None:
    existing = {"spec": {"nodes": ["a"], "dataEngine": "v2"}, "status": {"state": "x"}}
    assert subset_holds({"spec": {"nodes": ["a"]}}, existing)
    assert not subset_holds({"spec": {"nodes": ["b"]}}, existing)
    assert not subset_holds({"spec": {"other": 1}}, existing)


# --- properties: what the patch does when an RFC 6902 implementation applies it ---------------------

_keys = st.sampled_from(["spec", "template", "metadata", "a", "b/c", "d~e"])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
_documents = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(_keys, children, max_size=3)),
    max_leaves=12,
)
_paths = st.lists(_keys, min_size=1, max_size=4).map(pointer)


def _settable(snapshot: Any, path: str) -> bool:
    """Whether a patch can set `path`: its deepest existing ancestor is an object (missing parents
    are created below it), or it is an existing element of an array (replaced)."""
    parts = tokens(path)
    for depth in range(len(parts) - 1, -1, -1):
        ancestor = resolve(snapshot, pointer(parts[:depth]))
        if ancestor is not MISSING:
            break
    if isinstance(ancestor, dict):
        return True
    return isinstance(ancestor, list) and depth == len(parts) - 1 and resolve(snapshot, path) is not MISSING


@given(
    st.dictionaries(_keys, _documents, max_size=4),
    st.lists(
        st.tuples(_paths, st.one_of(_scalars.filter(lambda v: v is not None), st.just({}))),
        min_size=1,
        max_size=3,
        unique_by=lambda change: change[0],
    ),
)
def test_a_patch_built_from_a_snapshot_makes_its_changes_hold(
    document: dict[str, Any], changes: list[tuple[str, Any]]
) -> None:
    """The server accepts the patch exactly when every changed path can be set (see `_settable`),
    and then every change holds; otherwise it refuses the whole patch (a 422 the actuator reports)."""
    paths = [p for p, _ in changes]
    assume(not any(a != b and b.startswith(a + "/") for a in paths for b in paths))  # no change nests another
    snapshot = {**document, "metadata": {"resourceVersion": "9"}}
    fields = [FieldValue(path=p, value=v) for p, v in changes]
    ops = json_patch(fields, snapshot=snapshot)
    try:
        patched = apply_patch(copy.deepcopy(snapshot), ops)
    except PatchError:
        assert not all(_settable(snapshot, p) for p in paths)
        return
    assert all(_settable(snapshot, p) for p in paths)
    assert all(holds(patched, f) for f in fields)


@given(st.dictionaries(_keys, _documents, min_size=1, max_size=4), st.data())
def test_precondition_tests_pass_exactly_when_the_preconditions_hold(
    document: dict[str, Any], data: st.DataObject
) -> None:
    """`holds` (what the actuator checks on a read) and the server's `test` operation agree."""
    existing = [pointer(p) for p in _leaf_paths(document)]
    path = data.draw(st.sampled_from(existing) | _paths)
    actual = resolve(document, path)
    others = _scalars.filter(lambda v: v is not None)
    value = data.draw(others if actual is MISSING else st.just(actual) | others)
    assume(value is not None)  # "absent" is checked on a read, never as a `test`
    pre = FieldValue(path=path, value=value)
    ops = json_patch([FieldValue(path="/zz", value=1)], [pre])
    try:
        apply_patch(copy.deepcopy(document), ops)
    except PatchError:
        assert not holds(document, pre)
        return
    assert holds(document, pre)


def _leaf_paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _leaf_paths(v, (*prefix, k))]
    if isinstance(node, list) and node:
        return [p for i, v in enumerate(node) for p in _leaf_paths(v, (*prefix, str(i)))]
    return [prefix] if prefix else []
