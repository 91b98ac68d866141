"""The webhook server's pure parts: AdmissionReview in and out, facts read only when a rule asks,
and the reservation that keeps concurrent manager creates to one."""

from __future__ import annotations

import json

import pytest

from corral_v2_admission.facts import Fact, LazyFacts, judge
from corral_v2_admission.reservations import ManagerCreates
from corral_v2_admission.review import BadReview, answer, parse
from corral_v2admission import MANAGERS, VOLUMES, invalid


def review(**request: object) -> bytes:
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def test_a_review_is_parsed() -> None:
    request = parse(
        review(
            uid="u",
            operation="UPDATE",
            resource={"group": "longhorn.io", "version": "v1beta2", "resource": "volumes"},
            subResource="status",
            namespace="longhorn-system",
            object={"a": 1},
            oldObject=None,
            dryRun=True,
        )
    )
    assert (request.uid, request.operation, request.resource.resource, request.sub_resource) == (
        "u",
        "UPDATE",
        "volumes",
        "status",
    )
    assert request.object == {"a": 1} and request.old_object is None and request.dry_run is True


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "u"}}',
        review(operation="CREATE"),
        review(uid="", operation="CREATE"),
        b'{"kind": "AdmissionReview\xff", "apiVersion": "admission.k8s.io/v1"}',  # invalid UTF-8
    ],
)
def test_a_bad_review_is_refused_with_a_reason(body: bytes) -> None:
    with pytest.raises(BadReview) as caught:
        parse(body)
    assert str(caught.value)


def test_the_answer_carries_code_reason_message_and_field() -> None:
    allowed = json.loads(answer("u", None))
    assert allowed == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u", "allowed": True},
    }
    denied = json.loads(answer("u", invalid("nodes field is immutable", "spec.nodes")))["response"]
    assert denied["allowed"] is False
    assert denied["status"]["code"] == 422 and denied["status"]["reason"] == "Invalid"
    assert denied["status"]["message"] == "nodes field is immutable"
    assert denied["status"]["details"]["causes"] == [
        {"field": "spec.nodes", "message": "nodes field is immutable"}
    ]


async def test_facts_are_read_only_when_asked() -> None:
    asked: list[Fact] = []

    async def read(fact: Fact, facts: LazyFacts) -> None:
        asked.append(fact)
        if fact is Fact.NODES:
            facts.nodes = {"node-1": True, "node-2": False}
        elif fact is Fact.MANAGERS:
            facts.managers = {}
        else:
            facts.image = "im:new"

    v1 = {"metadata": {"name": "v"}, "spec": {"dataEngine": "v1", "nodeID": "node-1"}}
    assert await judge(VOLUMES, "UPDATE", v1, {**v1, "spec": {"nodeID": ""}}, read) is None
    assert asked == []
    old = {
        "metadata": {"name": "v"},
        "spec": {"dataEngine": "v2", "nodeID": ""},
        "status": {"ownerID": "node-2"},
    }
    new = {**old, "spec": {"dataEngine": "v2", "nodeID": "node-1"}}
    denial = await judge(VOLUMES, "UPDATE", old, new, read)
    assert denial is not None and "attach to node node-1" in denial.message
    assert asked == [Fact.NODES]
    assert await judge(MANAGERS, "CREATE", None, {"spec": {"dataEngine": "v2"}}, read) is None
    assert asked == [Fact.NODES, Fact.MANAGERS, Fact.NODES]


def test_an_admitted_create_counts_until_stored_or_expired() -> None:
    now = [0.0]
    creates = ManagerCreates(30.0, clock=lambda: now[0])
    creates.admitted("ns", "first")
    assert creates.pending("ns", {}) == {"first": ""}
    assert creates.pending("other", {}) == {}
    assert creates.pending("ns", {"first": "initializing"}) == {}  # the API shows it now
    creates.admitted("ns", "second")
    now[0] = 31.0
    assert creates.pending("ns", {}) == {}  # never stored: it stops counting
