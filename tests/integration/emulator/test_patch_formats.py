"""The patch formats and selector grammar on their own, against the examples of their specifications
(RFC 7386 appendix A, RFC 6902 appendix A) and kube-apiserver's label selector rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from corral_sandbox.emulator.errors import ApiError
from corral_sandbox.emulator.patching import PatchError, json_patch, merge_patch
from corral_sandbox.emulator.selectors import parse_field_selector, parse_label_selector

# RFC 7386, Appendix A: (original, patch, result)
MERGE_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("original", "patch", "result"), MERGE_EXAMPLES)
def test_merge_patch_rfc7386_examples(original: Any, patch: Any, result: Any) -> None:
    """RFC 7386 appendix A, and the original is left untouched (the store compares old and new)."""
    before = copy.deepcopy(original)
    assert merge_patch(original, patch) == result
    assert original == before


def test_json_patch_rfc6902_operations() -> None:
    """RFC 6902 appendix A: add (object member, array element, append with '-'), remove, replace, move,
    copy, test; JSON-pointer escapes ~0 and ~1."""
    doc = {"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "q": {"x": 1}}
    ops = [
        {"op": "add", "path": "/foo/1", "value": "qux"},
        {"op": "add", "path": "/foo/-", "value": "end"},
        {"op": "remove", "path": "/foo/0"},
        {"op": "replace", "path": "/a~1b", "value": 10},
        {"op": "test", "path": "/m~0n", "value": 2},
        {"op": "move", "from": "/q/x", "path": "/moved"},
        {"op": "copy", "from": "/foo", "path": "/copied"},
        {"op": "test", "path": "/copied", "value": ["qux", "baz", "end"]},
    ]
    assert json_patch(doc, ops) == {
        "foo": ["qux", "baz", "end"],
        "a/b": 10,
        "m~n": 2,
        "q": {},
        "moved": 1,
        "copied": ["qux", "baz", "end"],
    }


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": "other"}],
        [{"op": "test", "path": "/a", "value": 1}],  # "1" is not 1
        [{"op": "test", "path": "/b", "value": True}],  # 1 is not true
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "remove", "path": "/missing"}],
        [{"op": "add", "path": "/list/5", "value": 1}],
        [{"op": "add", "path": "/nope/deeper", "value": 1}],
        [{"op": "move", "from": "/obj", "path": "/obj/inner"}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "/a"}],
    ],
)
def test_json_patch_refusals(ops: list[dict[str, Any]]) -> None:
    """Every failing operation aborts the patch (the store answers 422 and changes nothing)."""
    with pytest.raises(PatchError):
        json_patch({"a": "1", "b": 1, "list": [], "obj": {}}, ops)


def test_json_patch_body_must_be_a_list() -> None:
    with pytest.raises(TypeError):
        json_patch({}, {"op": "add"})


def test_label_selector_errors_are_400() -> None:
    """kube-apiserver: an unparsable selector is a 400 BadRequest, never a silent match-all."""
    with pytest.raises(ApiError) as raised:
        parse_label_selector("tier in (gold")
    assert raised.value.code == 400
    with pytest.raises(ApiError):
        parse_field_selector("metadata.name")


def test_field_selector_on_other_fields() -> None:
    selector = parse_field_selector("spec.nodeName=n1,status.phase!=Failed")
    assert selector is not None
    assert selector.matches_object({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not selector.matches_object({"spec": {"nodeName": "n1"}, "status": {"phase": "Failed"}})
    assert not selector.matches_object({"spec": {}})
