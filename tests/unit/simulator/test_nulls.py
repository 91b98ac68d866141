"""The simulator's literal nulls (`NULL`, nulls.py): a reconciler says `NULL` for a nil Go map on a
nullable field, the diff keeps it apart from `None` (delete the key), and the wire turns a patch
holding one into a JSON Patch that stores the null, since a merge patch's null deletes."""

from __future__ import annotations

from typing import Any

from corral_sandbox.emulator.patching import json_patch
from corral_sandbox.simulator.nulls import NULL, as_json_patch, has_null, materialize
from corral_sandbox.simulator.writes import Write, diff_fields


def test_diff_writes_null_once_and_tells_it_from_delete() -> None:
    old: dict[str, Any] = {"replicaModeMap": {"r-1": "RW"}, "endpoint": "/dev/longhorn/v"}
    assert diff_fields(old, {"replicaModeMap": NULL, "endpoint": None}) == {
        "replicaModeMap": NULL,
        "endpoint": None,
    }
    assert diff_fields({"replicaModeMap": None}, {"replicaModeMap": NULL}) is None, "already null"
    assert diff_fields({}, {"replicaModeMap": NULL}) == {"replicaModeMap": NULL}, "absent is not null"
    assert diff_fields({}, {"replicaModeMap": None}) is None


def test_json_patch_keeps_the_null_and_merges_the_rest() -> None:
    observed: dict[str, Any] = {
        "metadata": {"name": "v-e-0"},
        "status": {"replicaModeMap": {"r-1": "RW"}, "endpoint": "/dev/x", "cloneStatus": {"a": {"x": 1}}},
    }
    body = {"status": {"replicaModeMap": NULL, "endpoint": None, "cloneStatus": {"b": {"x": 2}}}}
    assert has_null(body) and not has_null({"status": {"a": None}})
    ops = as_json_patch(body, observed)
    assert json_patch(observed, ops)["status"] == {
        "replicaModeMap": None,
        "cloneStatus": {"a": {"x": 1}, "b": {"x": 2}},
    }


def test_json_patch_adds_a_status_the_object_does_not_have_yet() -> None:
    observed: dict[str, Any] = {"metadata": {"name": "r"}, "spec": {}}
    ops = as_json_patch({"status": {"conditions": NULL, "currentState": "stopped"}}, observed)
    assert json_patch(observed, ops)["status"] == {"conditions": None, "currentState": "stopped"}


def test_the_replay_record_is_json_and_marks_the_null() -> None:
    write = Write("status", "engine", "v-e-0", {"status": {"replicaModeMap": NULL}})
    assert write.record()["body"] == {"status": {"replicaModeMap": "<null>"}}
    assert materialize({"a": [NULL]}) == {"a": [None]}
