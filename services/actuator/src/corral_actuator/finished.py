"""Every way a command ends, each said in one place.

Each step of a write returns how the command ended (`Finished`: an outcome, the detail that says
why, the resourceVersion it was judged or written at) or None to let the command go on; the
actuator turns the one it gets into the command's `CommandResult` (actuator.py). The details are
read by the deciding services, by operators, and by the tests, scenarios and chaos runs that pin
them: a refusal names the field, the invariant or the API server's answer. So each is worded here
once, and two steps that end a command for the same reason end it with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral_actuator.api import Answered
from corral_actuator.classify import Answer
from corral_kube.patching import describe_mismatch, resolve
from corral_model.envelopes import FieldValue, Outcome


@dataclass(frozen=True, slots=True)
class Finished:
    """How a command ended, before it is a `CommandResult`."""

    outcome: Outcome
    detail: str = ""
    resource_version: str = ""

    @property
    def wrote(self) -> bool:
        """Applied by writing the change itself: a change found holding, an object found existing
        or an Event counted again each say so in the detail."""
        return self.outcome is Outcome.APPLIED and not self.detail


def version(document: dict[str, Any] | None) -> str:
    """The resourceVersion of an object as read ("" for none)."""
    value = resolve(document, "/metadata/resourceVersion") if document is not None else None
    return value if isinstance(value, str) else ""


def _http(answered: Answered) -> str:
    return f"HTTP {answered.status}: {answered.message}"


# --- applied ------------------------------------------------------------------------------------


def written(resource_version: str) -> Finished:
    return Finished(Outcome.APPLIED, "", resource_version)


def already_held(document: dict[str, Any]) -> Finished:
    return Finished(Outcome.APPLIED, "already held; nothing written", version(document))


def already_deleting(document: dict[str, Any]) -> Finished:
    return Finished(Outcome.APPLIED, "already being deleted; nothing written", version(document))


def already_existed(document: dict[str, Any]) -> Finished:
    return Finished(Outcome.APPLIED, "already existed; nothing written", version(document))


def counted_again(resource_version: str) -> Finished:
    return Finished(Outcome.APPLIED, "counted again on the existing Event", resource_version)


# --- precondition-failed: the deciding service re-decides from fresh state ------------------------


def precondition_broken(document: dict[str, Any], field: FieldValue) -> Finished:
    return Finished(Outcome.PRECONDITION_FAILED, describe_mismatch(document, field), version(document))


def related_broken(reason: str, document: dict[str, Any]) -> Finished:
    """A precondition on another object the decision read (related.py), named there."""
    return Finished(Outcome.PRECONDITION_FAILED, reason, version(document))


def recreated(document: dict[str, Any]) -> Finished:
    return Finished(
        Outcome.PRECONDITION_FAILED,
        "uid differs from the one judged: the object was recreated",
        version(document),
    )


def other_content(existing: dict[str, Any]) -> Finished:
    return Finished(
        Outcome.PRECONDITION_FAILED, "an object with this name exists with other content", version(existing)
    )


def changed_under(attempts: int, document: dict[str, Any] | None = None, *, what: str = "object") -> Finished:
    return Finished(
        Outcome.PRECONDITION_FAILED,
        f"the {what} changed under {attempts} attempts in a row",
        version(document),
    )


# --- rejected-by-policy: security-logged where the result is made (actuator.py) -----------------


def refused(reason: str, document: dict[str, Any] | None = None) -> Finished:
    """The policy, or an invariant held on the objects themselves, refuses the command."""
    return Finished(Outcome.REJECTED_BY_POLICY, reason, version(document))


def outside_policy(document: dict[str, Any], field: FieldValue) -> Finished:
    """The rule's required field (e.g. the instance-manager label) is not held: the object is
    outside the policy, whatever the command's preconditions say."""
    mismatch = describe_mismatch(document, field, expected_is_public=True)
    return refused(f"the object is outside the policy: {mismatch}", document)


# --- expired, not-found, error ----------------------------------------------------------------


def expired(age: float, max_age: float, document: dict[str, Any] | None = None) -> Finished:
    detail = (
        f"created {age:.1f} s ago, older than the maximum command age of {max_age:g} s;"
        " not applied (its issuer may have given up on it)"
    )
    return Finished(Outcome.EXPIRED, detail, version(document))


def not_found(answered: Answered) -> Finished:
    return Finished(Outcome.NOT_FOUND, answered.message)


def http_error(answered: Answered) -> Finished:
    return Finished(Outcome.ERROR, _http(answered))


def unreadable(what: str, answered: Answered) -> Finished:
    return Finished(Outcome.ERROR, f"reading {what}: HTTP {answered.status}")


def refused_again(answered: Answered, resource_version: str) -> Finished:
    """A patch tested on a resourceVersion that still holds, refused all the same for another
    reason than a conflict: the server would refuse it again."""
    return Finished(Outcome.ERROR, _http(answered), resource_version)


def conflict_persisted(retries: int, answered: Answered, document: dict[str, Any]) -> Finished:
    """A 409 that outlasted the conflict retries (conflicts.py) while every precondition held on
    each fresh read: the decision is as right as when it was taken, and the API server would not
    apply it. That is the server failing the write, an `error`, not a judgement: re-deciding from
    fresh state gives the same command, and the object need not move again (an injected fault, a
    hook answering 409, contention that has passed). As `precondition-failed` it held the target
    until the view showed a newer object, so an idle one waited the decider's whole retry backoff
    (engine-upgrade: 120 s) with nothing to say why; as an `error` it is tried again after the
    decider's short, doubling error backoff, and this detail names the conflict."""
    return Finished(
        Outcome.ERROR,
        f"conflict persisted through {retries} retries: {_http(answered)}",
        version(document),
    )


def gave_up(error: Exception) -> Finished:
    """Overload or server trouble that outlasted the retries (classify.py)."""
    return Finished(Outcome.ERROR, f"gave up after retries: {error}")


def ended_by(answered: Answered) -> Finished | None:
    """How a write's answer ends the command (written, gone, refused for good), or None on a
    409/422, which only the object can explain."""
    answer = answered.answer
    if answer is Answer.OK:
        return written(answered.resource_version)
    if answer is Answer.NOT_FOUND:
        return not_found(answered)
    if answer is Answer.REFUSED:
        return http_error(answered)
    return None
