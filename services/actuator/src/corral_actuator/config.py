"""The actuator's settings, from `CORRAL_*` environment variables (see corral_runtime.config)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from corral_actuator.admission import DEFAULT_MAX_CLOCK_SKEW
from corral_actuator.expiry import DEFAULT_MAX_COMMAND_AGE
from corral_runtime.config import ServiceConfig

POLICY_FILE = Path("deploy/policy/actuator-policy.yaml")
MOUNTED_POLICY = Path("/etc/corral/actuator-policy.yaml")


class ActuatorConfig(ServiceConfig, frozen=True, kw_only=True):
    kubeconfig: str = ""
    """Empty: $KUBECONFIG, then the in-cluster ServiceAccount."""
    policy_path: str = ""
    """Empty: /etc/corral/actuator-policy.yaml when mounted, else deploy/policy/ of the checkout."""
    dry_run: bool = False
    """Send every write with dryRun=All: the API server validates but stores nothing."""
    qps: Annotated[float, msgspec.Meta(ge=0)] = 50.0
    """Client-side rate limit on API requests; 0 turns the limiter off."""
    burst: Annotated[int, msgspec.Meta(ge=1)] = 100
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 32
    """Commands in flight at once (handlers of the one pull subscriber of the durable consumer)."""
    fetch_batch: Annotated[int, msgspec.Meta(ge=1)] = 4
    """Commands received ahead per handler (the pull asks for concurrency times this)."""
    ack_wait_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    max_deliver: Annotated[int, msgspec.Meta(ge=2)] = 5
    max_command_age_s: Annotated[float, msgspec.Meta(ge=0)] = DEFAULT_MAX_COMMAND_AGE
    """Refuse (`expired`, unapplied) a command created longer ago than this; 0 turns it off. Keep it
    below every decision service's command TTL (engine-upgrade `command_ttl_s`, 60 s) minus the
    worst clock skew between pods: a service stops counting a command after its TTL, so one
    applied later could take a slot twice. Events (reports) are never expired; commands without
    `createdAt` are refused (admission.py)."""
    max_clock_skew_s: Annotated[float, msgspec.Meta(ge=0)] = DEFAULT_MAX_CLOCK_SKEW
    """Refuse a command whose `createdAt` is further than this ahead of the actuator's clock: a
    command from the future would dodge the age limit. Set it above the worst clock skew between
    pods; `max_command_age_s` + this must stay below every decision service's command TTL."""
    recent_commands: Annotated[int, msgspec.Meta(ge=1)] = 100_000
    """How many command ids (and their results) are remembered to apply a repeat at most once."""
    request_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    retry_attempts: Annotated[int, msgspec.Meta(ge=1)] = 6
    retry_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    conflict_retries: Annotated[int, msgspec.Meta(ge=0)] = 4
    """A patch refused with 409 Conflict whose preconditions still hold on a fresh read is sent again
    up to this many times within the command (conflicts.py); 0 reports the first conflict."""
    conflict_wait_s: Annotated[float, msgspec.Meta(ge=0)] = 0.02
    """The first pause before such a retry; it doubles per retry (at most 0.5 s), plus jitter."""
    settings_ttl_s: Annotated[float, msgspec.Meta(ge=0)] = 2.0
    per_node_limit: Annotated[int, msgspec.Meta(ge=0)] = 1
    """corral's own limit of engine upgrades in flight per owner node, held while Longhorn's
    `concurrent-automatic-engine-upgrade-per-node-limit` is 0 (engine-upgrade in modes auto and
    act upgrades with its own CORRAL_PER_NODE_LIMIT then): give both services the same value."""
    max_connections: Annotated[int, msgspec.Meta(ge=1)] = 64
    audit_log: bool = True
    """Log every applied write (the results stream records them in any case)."""


def policy_file(config: ActuatorConfig) -> Path:
    if config.policy_path:
        return Path(config.policy_path)
    if MOUNTED_POLICY.exists():
        return MOUNTED_POLICY
    for directory in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents):
        candidate = directory / POLICY_FILE
        if candidate.exists():
            return candidate
    return MOUNTED_POLICY
