"""How long an expectation counts and how long a refusal holds its target: one set of figures for
every decision service, so that what an expectation means is decided in one place.

`DecisionConfig` reads them from the environment (`command_ttl_s`…) and hands them to its decider
as a `Timing`; a decider's own config carries one rather than copies of the three fields.
"""

from __future__ import annotations

import msgspec


class Timing(msgspec.Struct, frozen=True, kw_only=True):
    command_ttl: float = 60.0
    """A command with neither a result nor a visible effect after this long is presumed lost."""
    applied_ttl: float = 600.0
    """After an `applied` result, how long the view may lag before the command stops counting."""
    retry_backoff: float = 120.0
    """After a refusal with no fresher object in view, wait this long before the same command (its
    next attempt, under an id of its own: LH_COMMANDS' dedup window does not drop it)."""
    error_backoff: float = 5.0
    """After an `error` result (the API server failed the write: 429s or 500s past the actuator's
    own retries, a timeout; no judgement of the decision), the first wait before the next attempt,
    doubled with each attempt up to `retry_backoff`. Nothing in view changes when the API server
    recovers, so a refusal's hold would keep an idle target waiting the whole `retry_backoff`."""
