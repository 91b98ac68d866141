"""The decision kit: a `Decider` (the rules) and one runner (everything else) per decision service.

    DEFINITION = DecisionService(name="my-service", config=MyConfig, reads={"volume": Volume},
                                 commands=frozenset({"volume"}), new_decider=MyDecider)
    # __main__.py:
    raise SystemExit(run(DEFINITION))

See README.md for what a new service needs and where it is listed.
"""

from corral_decision.coexistence import LonghornLoop, Mode, Stance
from corral_decision.decider import Clock, Decider, Explanation, InvalidEvent, Pending, Runnable, target_key
from corral_decision.expectations import Expectation
from corral_decision.harness import run, service_main
from corral_decision.kit import DeciderKit
from corral_decision.registry import decision_service, decision_services
from corral_decision.runner import BOOTSTRAP, DecisionRunner
from corral_decision.service import DecisionConfig, DecisionService
from corral_decision.timing import Timing

__all__ = [
    "BOOTSTRAP",
    "Clock",
    "Decider",
    "DeciderKit",
    "DecisionConfig",
    "DecisionRunner",
    "DecisionService",
    "Expectation",
    "Explanation",
    "InvalidEvent",
    "LonghornLoop",
    "Mode",
    "Pending",
    "Runnable",
    "Stance",
    "Timing",
    "decision_service",
    "decision_services",
    "run",
    "service_main",
    "target_key",
]
