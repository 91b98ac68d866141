"""What a message handler can tell the consumer about a failure, and what a publish can report.

The consumer's reaction is decided by the class of the error, not by the message text: a transient
failure is worth retrying later (nak with a delay from the backoff list); a permanent one will fail
the same way every time, so the message is parked in LH_DEAD with its reason and acked.
"""

from __future__ import annotations

from dataclasses import dataclass


class BusError(Exception):
    """Base class of everything corral_bus raises on purpose."""


class TransientError(BusError):
    """The handler could not finish now but may later (API down, conflict, timeout): redeliver.

    `delay` overrides the consumer's backoff for this one redelivery.
    """

    def __init__(self, message: str = "", *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(BusError):
    """The message can never be handled (fails validation, refers to nonsense): dead-letter it."""


class StreamConfigError(BusError):
    """A stream exists with a configuration that cannot be changed in place (e.g. its retention).

    `refused`: the server itself refused the configuration (more replicas than it has servers, no
    room), which waiting cannot mend; otherwise the streams may simply not be set up yet."""

    def __init__(self, message: str = "", *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class NotAuthorized(BusError):
    """NATS refused the client's credentials on connect (`Authorization Violation`): retrying with
    the same ones cannot help, so a client that asked to (the CLI) is told once instead."""


@dataclass(frozen=True, slots=True)
class PublishFailure:
    """One message whose publish was not acknowledged by JetStream."""

    subject: str
    msg_id: str
    error: str


class PublishError(BusError):
    """Raised by `Publisher.flush` when some messages were not stored; lists them all."""

    def __init__(self, failures: list[PublishFailure]) -> None:
        self.failures = failures
        first = failures[0] if failures else None
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        detail = f"{first.subject} [{first.msg_id}]: {first.error}{more}" if first else "no failures"
        super().__init__(f"{len(failures)} publish(es) not acknowledged: {detail}")
