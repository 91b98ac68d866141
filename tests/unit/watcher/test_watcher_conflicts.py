"""The verdict on an event the stream refused for a wrong last sequence (corral_watcher.conflicts)."""

from __future__ import annotations

from corral_watcher.conflicts import LastMessage, Resolution, Verdict, overrule, resolve, resource_version


def event(resource_version: str) -> bytes:
    return b'{"type":"MODIFIED","resourceVersion":"%s"}' % resource_version.encode()


def test_nothing_stored_republishes_expecting_an_empty_subject() -> None:
    assert resolve("v:u:5", event("5"), None) == Resolution(Verdict.REPUBLISH, 0)


def test_our_own_event_stored_is_settled() -> None:
    assert resolve("v:u:5", event("5"), LastMessage(8, "v:u:5", event("5"))) == Resolution(Verdict.STORED, 8)


def test_a_newer_state_supersedes_ours_an_older_one_gets_ours_on_top() -> None:
    assert resolve("v:u:5", event("5"), LastMessage(8, "v:u:9", event("9"))).verdict is Verdict.SUPERSEDED
    assert resolve("v:u:9", event("9"), LastMessage(8, "v:u:5", event("5"))) == Resolution(
        Verdict.REPUBLISH, 8
    )


def test_what_cannot_be_compared_gets_ours_on_top() -> None:
    marker = LastMessage(8, "", b"")  # a server's marker: no payload
    assert resolve("v:u:5", event("5"), marker) == Resolution(Verdict.REPUBLISH, 8)
    assert resource_version(b"not json") is None and resource_version(event("abc")) is None
    assert resource_version(event("12")) == 12


def test_a_newer_state_the_api_server_never_had_is_contradicted() -> None:
    forged = LastMessage(8, "v:u:999999999999", event("999999999999"))
    superseded = resolve("v:u:5", event("5"), forged)
    assert superseded.verdict is Verdict.SUPERSEDED
    # The API server's newest state of the object is 7: the stored 999999999999 never existed.
    assert overrule(superseded, forged, truth=7) == Resolution(Verdict.CONTRADICTED, 8)


def test_a_newer_state_the_api_server_vouches_for_still_supersedes_ours() -> None:
    replica = LastMessage(8, "v:u:9", event("9"))  # another watcher replica, ahead of this one
    superseded = resolve("v:u:5", event("5"), replica)
    assert overrule(superseded, replica, truth=9) == superseded
    assert overrule(superseded, replica, truth=12) == superseded


def test_the_api_server_only_overrules_a_superseding_state() -> None:
    older = LastMessage(8, "v:u:3", event("3"))
    republish = resolve("v:u:5", event("5"), older)
    assert overrule(republish, older, truth=1) == republish
    assert overrule(Resolution(Verdict.REPUBLISH, 0), None, truth=1) == Resolution(Verdict.REPUBLISH, 0)
