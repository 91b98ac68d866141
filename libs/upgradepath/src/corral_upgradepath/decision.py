"""The gate's answer: allowed or blocked, the exact reason, and what must be reported either way.

A decision is a value, not an exception: the pre-upgrade command prints it, a service turns it into
Kubernetes Events through the actuator, and tests compare it field by field.
"""

from __future__ import annotations

import enum

import msgspec


class Check(enum.StrEnum):
    """Which part of the gate decided: the one that blocked, or the last one passed (for logs and
    metrics; the reason says why)."""

    BYPASS = "bypass"  # the version check is disabled
    VERSION = "version"  # Longhorn version path
    ENGINE = "engine"  # engine API versions of the engine images in use


class GateWarning(msgspec.Struct, frozen=True, kw_only=True):
    """A Warning Kubernetes Event the gate asks to be recorded even though it lets the start go on."""

    reason: str
    message: str


# Longhorn's event reasons (constant/events.go) and the bypass warning text (upgrade/util).
REASON_FAILED = "FailedUpgradePreCheck"
REASON_PASSED = "PassedUpgradeCheck"
REASON_BYPASS = "Upgrade"
PASSED_MESSAGE = "pre-upgrade check passed"


class GateDecision(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    allowed: bool
    current_version: str
    target_version: str
    # Blocked: Longhorn's error text, verbatim. Allowed: a short note on which rule allowed it.
    reason: str
    check: Check
    warnings: tuple[GateWarning, ...] = ()

    @property
    def blocked(self) -> bool:
        return not self.allowed

    def summary(self) -> str:
        """One line for humans and logs: `allowed: …` or `blocked: …`."""
        return f"{'allowed' if self.allowed else 'blocked'}: {self.reason}"
