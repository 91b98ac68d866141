"""How a write's answer and the object as read end a command (finished.py, write.py), without a server."""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest

from corral_actuator.api import Answered, KubeApi
from corral_actuator.conflicts import ConflictBudget, ConflictRetry
from corral_actuator.finished import Finished, already_held, changed_under, ended_by, written
from corral_actuator.kinds import ALL_KINDS
from corral_actuator.write import Write
from corral_model.envelopes import Command, FieldValue, Outcome, Target, Verb, new_command

NO_SERVER = cast("KubeApi", None)
"""settled() and the paths read nothing: no server behind the api."""
LABEL = FieldValue(path="/metadata/labels/app", value="longhorn")
IMAGE = "/spec/image"


def answered(status: int, body: Any) -> Answered:
    return Answered(status, msgspec.json.encode(body))


def test_a_write_answered_ok_is_applied_at_the_version_the_server_answered() -> None:
    finished = ended_by(answered(200, {"metadata": {"resourceVersion": "42"}}))
    assert finished == Finished(Outcome.APPLIED, "", "42")
    assert finished.wrote


def test_gone_and_refused_for_good_end_the_command_with_the_servers_words() -> None:
    assert ended_by(answered(404, {"message": 'volumes "v" not found'})) == Finished(
        Outcome.NOT_FOUND, 'volumes "v" not found'
    )
    assert ended_by(answered(403, {"message": "forbidden"})) == Finished(Outcome.ERROR, "HTTP 403: forbidden")


@pytest.mark.parametrize("status", [409, 422])
def test_a_conflict_or_a_failed_test_is_left_for_the_object_to_explain(status: int) -> None:
    assert ended_by(answered(status, {"message": "nope"})) is None


def test_an_applied_command_that_wrote_nothing_says_so_and_is_not_a_write() -> None:
    held = already_held({"metadata": {"resourceVersion": "7"}})
    assert (held.outcome, held.resource_version, held.wrote) == (Outcome.APPLIED, "7", False)
    assert written("8").wrote


def test_changed_under_names_the_attempts_and_the_version_last_read() -> None:
    assert changed_under(3, {"metadata": {"resourceVersion": "9"}}) == Finished(
        Outcome.PRECONDITION_FAILED, "the object changed under 3 attempts in a row", "9"
    )
    assert changed_under(2, what="Event").detail == "the Event changed under 2 attempts in a row"


def write_of(command: Command, guards: tuple[FieldValue, ...] = ()) -> Write:
    return Write(NO_SERVER, command, guards, ALL_KINDS["volume"], ConflictBudget(ConflictRetry()), 3)


def volume_write() -> Write:
    """An engine image change on a volume whose rule requires the app label."""
    command = new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace="ns", name="v"),
        changes=(FieldValue(path=IMAGE, value="new"),),
        preconditions=(FieldValue(path=IMAGE, value="old"),),
    )
    return write_of(command, (LABEL,))


def document(image: str, label: str = "longhorn") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "5", "labels": {"app": label}}, "spec": {"image": image}}


def test_a_read_outside_the_policy_is_refused_before_anything_else_is_judged() -> None:
    settled = volume_write().settled(document("new", label="other"))
    assert settled is not None
    assert settled.outcome is Outcome.REJECTED_BY_POLICY
    assert settled.detail.startswith("the object is outside the policy: ")


def test_a_change_already_there_is_applied_even_though_its_precondition_no_longer_holds() -> None:
    assert volume_write().settled(document("new")) == Finished(
        Outcome.APPLIED, "already held; nothing written", "5"
    )


def test_a_broken_precondition_is_named_and_a_holding_one_lets_the_write_go_on() -> None:
    settled = volume_write().settled(document("other"))
    assert settled is not None
    assert (settled.outcome, settled.resource_version) == (Outcome.PRECONDITION_FAILED, "5")
    assert IMAGE in settled.detail
    assert volume_write().settled(document("old")) is None


def test_a_status_patch_goes_to_the_status_subresource() -> None:
    write = volume_write()
    assert write.path == "/apis/longhorn.io/v1beta2/namespaces/ns/volumes/v"
    assert write.patch_path == write.path
    status = new_command(
        service="v2-upgrade",
        verb=Verb.PATCH_STATUS,
        target=Target(kind="Volume", namespace="ns", name="v"),
        changes=(FieldValue(path="/status/x", value=1),),
    )
    on_status = write_of(status)
    assert on_status.patch_path == write.path + "/status"
