"""`admission.k8s.io/v1` AdmissionReview in and out, pure: what kube-apiserver asks, and the answer.

A request that is not a well-formed AdmissionReview is refused with a `BadReview` carrying the
reason (the server answers 400 and logs it); it never reaches the rules and never crashes the server.
"""

from __future__ import annotations

from typing import Any

import msgspec

from corral_v2admission import Denial

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    pass


class GroupVersionResource(msgspec.Struct, frozen=True):
    group: str = ""
    version: str = ""
    resource: str = ""


class Request(msgspec.Struct, frozen=True, rename="camel"):
    uid: str
    operation: str
    resource: GroupVersionResource = GroupVersionResource()
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool | None = None


class Review(msgspec.Struct, frozen=True, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: Request | None = None


def parse(body: bytes) -> Request:
    try:
        review = msgspec.json.decode(body, type=Review)
    except Exception as error:  # msgspec's errors and invalid UTF-8 (UnicodeDecodeError) alike
        raise BadReview(f"not an AdmissionReview: {error}") from error
    if review.kind != "AdmissionReview" or review.api_version != API_VERSION:
        raise BadReview(
            f"expected kind AdmissionReview of {API_VERSION}, got {review.kind} {review.api_version}"
        )
    if review.request is None or not review.request.uid:
        raise BadReview("the AdmissionReview has no request (or no request.uid)")
    return review.request


def answer(uid: str, denial: Denial | None) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": denial is None}
    if denial is not None:
        status: dict[str, Any] = {"code": denial.code, "reason": denial.reason, "message": denial.message}
        if denial.field:
            status["details"] = {"causes": [{"field": denial.field, "message": denial.message}]}
        response["status"] = status
    return msgspec.json.encode({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})
