"""What an API server answer means for a command: done, refused, gone, worth retrying, or failed.

Only overload and server trouble are retried here (429, 5xx, timeouts, lost connections): the same
request may well succeed a moment later. A 409 or 422 may mean a precondition no longer holds, which
only the object can tell: the actuator reads it, reports a broken precondition (the deciding service
must look at fresh state) and sends a patch whose preconditions still hold again after a 409
(conflicts.py). Any other 4xx is a request the server will never accept.
"""

from __future__ import annotations

import enum


class Answer(enum.Enum):
    OK = "ok"
    PRECONDITION = "precondition"
    NOT_FOUND = "not-found"
    RETRY = "retry"
    REFUSED = "refused"


def classify(status: int) -> Answer:
    if 200 <= status < 300:
        return Answer.OK
    if status in (409, 422):
        return Answer.PRECONDITION
    if status == 404:
        return Answer.NOT_FOUND
    if status in (408, 429) or status >= 500:
        return Answer.RETRY
    return Answer.REFUSED


class TransientApiError(Exception):
    """An answer (or a missing one) worth retrying; the retry loop (stamina) catches exactly this."""

    def __init__(self, message: str, *, status: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def retry_after_seconds(value: str | None, *, cap: float = 10.0) -> float | None:
    """The server's Retry-After (seconds form only; Kubernetes never sends the date form), capped."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), cap)
