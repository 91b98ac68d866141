"""The decision services' lease TTL: short enough that a standby leads within 3 s of a kill -9
(issue 19 part 4), and the lease ratios still make a holder stop leading before any takeover."""

from __future__ import annotations

import pytest

from corral_bus.lease import fast_failover, holder_margin, poll_interval, probe_after, worst_failover
from corral_decision import DecisionConfig
from corral_decision.registry import decision_services
from corral_runtime.config import ServiceConfig

FAILOVER_BUDGET_S = 3.0
KILLED_LEADER_BUDGET_S = 1.0
"""A warm standby leads within this of its leader's kill -9 (issue 28): the liveness probe's bound."""


@pytest.mark.parametrize("service", sorted(decision_services()))
def test_every_decision_service_fails_over_within_the_budget(service: str) -> None:
    ttl = decision_services()[service].config().lease_ttl_s
    assert worst_failover(ttl) <= FAILOVER_BUDGET_S - 0.5, f"{service}: lease TTL {ttl} s"


def test_decision_services_lease_shorter_than_the_others() -> None:
    assert DecisionConfig().lease_ttl_s < ServiceConfig().lease_ttl_s


def test_the_holder_stops_leading_before_a_standby_may_take_over() -> None:
    ttl = DecisionConfig().lease_ttl_s
    assert holder_margin(ttl) > 0
    # Room for a replica that consulted is_leader at its last moment to have its command out (a
    # longer pause is fenced by the actuator), and more than a standby's poll.
    assert holder_margin(ttl) >= max(0.3, poll_interval(ttl))


@pytest.mark.parametrize("service", sorted(decision_services()))
def test_every_decision_service_replaces_a_killed_leader_within_a_second(service: str) -> None:
    ttl = decision_services()[service].config().lease_ttl_s
    assert fast_failover(ttl) <= KILLED_LEADER_BUDGET_S - 0.05, f"{service}: lease TTL {ttl} s"
    # A standby asks only once a renewal is overdue: a holder that is there is asked rarely, if at all.
    assert probe_after(ttl) > ttl / 4
