"""A refused admission request: the HTTP code and reason Longhorn's webhook answers with, and its text.

Longhorn's webhooks refuse with three kinds of error (longhorn-behaviour.md §5.3): a bad request
(400, "another dataEngineUpgradeManager is in progress"), an invalid object (422, most rules, naming
the field), and an internal error (500, the owner node could not be read). The sandbox's admission
hook and corral's webhook server both turn a `Denial` into the answer kube-apiserver gives:
`admission webhook "<name>" denied the request: <message>` with `code`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Denial:
    code: int
    reason: str
    message: str
    field: str = ""


def bad_request(message: str) -> Denial:
    return Denial(400, "BadRequest", message)


def invalid(message: str, field: str = "") -> Denial:
    return Denial(422, "Invalid", message, field)


def internal_error(message: str) -> Denial:
    return Denial(500, "InternalError", message)
