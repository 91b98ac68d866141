"""corral actuator: the only writer to the Kubernetes API server.

It consumes LH_COMMANDS, checks each command against the declarative policy
(deploy/policy/actuator-policy.yaml), applies it as a preconditioned JSON Patch / delete / create
through a client-side rate limiter, and publishes a CommandResult to LH_RESULTS.

Entry points: `python -m corral_actuator` (the service), `Actuator.execute(command)` (one command,
no bus), `Policy.load(path).check(command)` (the pure policy).
"""

from corral_actuator.actuator import Actuator
from corral_actuator.policy import Policy, PolicyError, Verdict

__all__ = ["Actuator", "Policy", "PolicyError", "Verdict"]
