"""Every installed decision service writes only its rules: what the runner drives (results,
adoption, expectations, the resourceVersions it holds, timers, the decision pass itself) is the
kit's, never overridden by a service's decider. A fifth service copies rules, not plumbing."""

from __future__ import annotations

from typing import Any

import pytest

from corral_decision import Decider, DeciderKit, DecisionService, Runnable, decision_services
from tests.integration.decision.toy import TOY

KIT_OWNED = ("record_result", "adopt", "expectations", "observed_version", "next_due", "decide")
SERVICES = [*sorted(decision_services().values(), key=lambda s: s.name), TOY]


@pytest.mark.parametrize("service", SERVICES, ids=[s.name for s in SERVICES])
def test_a_deciders_plumbing_is_the_kits(service: DecisionService[Any]) -> None:
    name = service.name
    decider = service.new_decider(service.config(), lambda: 0.0)
    assert isinstance(decider, DeciderKit)
    assert isinstance(decider, Decider) and isinstance(decider, Runnable)
    overridden = [m for m in KIT_OWNED if getattr(type(decider), m) is not getattr(DeciderKit, m)]
    assert overridden == [], f"{name} overrides the kit's {overridden}"
    assert decider.next_due() is None and list(decider.expectations()) == []
