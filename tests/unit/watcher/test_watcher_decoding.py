"""Watch-stream and list decoding into slim Structs (corral_kube.decoding, corral_kube.watching)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral_kube.decoding import (
    LAST_APPLIED,
    Bookmark,
    KindDecoder,
    UndecodableLine,
    WatchError,
    WatchEvent,
)
from corral_kube.watching import LineSplitter
from corral_model.longhorn import Volume


def volume(name: str, rv: int, **extra_meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Volume",
        "metadata": {
            "name": name,
            "namespace": "longhorn-system",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "managedFields": [{"manager": "longhorn-manager", "fieldsV1": {"f:spec": {}}}],
            **extra_meta,
        },
        "spec": {"image": "longhornio/longhorn-engine:v1.7.0", "numberOfReplicas": 3, "unknownField": 1},
        "status": {"state": "attached", "robustness": "healthy", "ownerID": "node-1"},
    }


def line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}).encode() + b"\n"


decoder = KindDecoder(Volume)


def test_a_chunk_of_events_decodes_into_typed_slim_objects() -> None:
    chunk = line("ADDED", volume("v1", 10)) + line("MODIFIED", volume("v1", 11))
    items = decoder.decode_lines(chunk)
    assert [type(i) for i in items] == [WatchEvent, WatchEvent]
    first = items[0]
    assert isinstance(first, WatchEvent)
    assert first.type == "ADDED"
    assert isinstance(first.object, Volume)
    assert first.object.metadata.resource_version == "10"
    assert first.object.spec.image == "longhornio/longhorn-engine:v1.7.0"
    assert first.object.status.owner_id == "node-1"
    assert not hasattr(first.object.metadata, "managed_fields")


def test_bookmarks_and_errors_between_events_keep_their_order() -> None:
    bookmark = {"kind": "Volume", "metadata": {"resourceVersion": "15"}}
    gone = {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old"}
    chunk = (
        line("ADDED", volume("v1", 10))
        + line("BOOKMARK", bookmark)
        + line("DELETED", volume("v1", 16))
        + line("ERROR", gone)
    )
    items = decoder.decode_lines(chunk)
    assert [type(i) for i in items] == [WatchEvent, Bookmark, WatchEvent, WatchError]
    assert items[1] == Bookmark(resource_version="15")
    error = items[3]
    assert isinstance(error, WatchError) and error.gone and error.message == "too old"


def test_a_line_that_does_not_fit_is_reported_not_fatal() -> None:
    nameless = volume("v1", 10)
    del nameless["metadata"]["name"]
    chunk = line("ADDED", volume("v0", 9)) + line("ADDED", nameless) + b"{not json\n"
    items = decoder.decode_lines(chunk)
    assert [type(i) for i in items] == [WatchEvent, UndecodableLine, UndecodableLine]
    assert "name" in items[1].error  # type: ignore[union-attr]


def test_last_applied_configuration_is_dropped_other_annotations_kept() -> None:
    annotated = volume("v1", 10, annotations={LAST_APPLIED: "{...huge...}", "keep": "me"})
    chunk = line("ADDED", annotated)
    bookmark = line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    # The fast path (a chunk of events) and the slow one (a chunk holding a bookmark).
    for items in (decoder.decode_lines(chunk), decoder.decode_lines(chunk + bookmark)[:1]):
        event = items[0]
        assert isinstance(event, WatchEvent)
        assert event.object.metadata.annotations == {"keep": "me"}
    body = {"metadata": {"resourceVersion": "12"}, "items": [annotated]}
    listed = decoder.decode_list(json.dumps(body).encode())
    assert listed.items[0].metadata.annotations == {"keep": "me"}


def test_a_list_page_carries_its_version_and_continue_token() -> None:
    body = {
        "kind": "VolumeList",
        "metadata": {"resourceVersion": "42", "continue": "abc"},
        "items": [volume("a", 40), volume("b", 41)],
    }
    page = decoder.decode_list(json.dumps(body).encode())
    assert page.resource_version == "42"
    assert page.continue_token == "abc"
    assert [v.metadata.name for v in page.items] == ["a", "b"]


@pytest.mark.parametrize("cut", [1, 7, 50, 333])
def test_line_splitter_reassembles_lines_cut_anywhere(cut: int) -> None:
    stream = b"".join(line("MODIFIED", volume(f"v{i}", 100 + i)) for i in range(20))
    splitter = LineSplitter()
    decoded: list[Any] = []
    for start in range(0, len(stream), cut):
        complete = splitter.feed(stream[start : start + cut])
        assert complete == b"" or complete.endswith(b"\n")
        if complete:
            decoded.extend(decoder.decode_lines(complete))
    assert splitter.flush() == b""
    assert [e.object.metadata.resource_version for e in decoded] == [str(100 + i) for i in range(20)]


def test_a_list_with_an_unreadable_item_keeps_the_others_and_names_the_bad_one() -> None:
    bad = volume("broken", 41)
    bad["spec"]["numberOfReplicas"] = "three"
    body = {"metadata": {"resourceVersion": "42"}, "items": [volume("a", 40), bad, volume("b", 43)]}
    page = decoder.decode_list(json.dumps(body).encode())
    assert [v.metadata.name for v in page.items] == ["a", "b"]
    assert page.resource_version == "42"
    assert [r.name for r in page.rejected] == ["broken"]
    assert "numberOfReplicas" in page.rejected[0].error
    # what the dead letter needs: where it lives, which version, and the object as sent
    rejected = page.rejected[0]
    assert (rejected.namespace, rejected.uid, rejected.resource_version) == (
        "longhorn-system",
        "uid-broken",
        "41",
    )
    assert json.loads(rejected.raw) == bad


def test_an_unreadable_watch_event_carries_the_object_name() -> None:
    bad = volume("broken", 41)
    bad["spec"]["numberOfReplicas"] = "three"
    [item] = decoder.decode_lines(line("MODIFIED", bad))
    assert isinstance(item, UndecodableLine) and item.name == "broken"
    assert (item.type, item.namespace, item.uid, item.resource_version) == (
        "MODIFIED",
        "longhorn-system",
        "uid-broken",
        "41",
    )
    assert json.loads(item.object) == bad
