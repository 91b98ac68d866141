"""The actuator's own start-up gate: every service's gate, but it records its Events itself.

Other services ask the actuator to record their gate Events through LH_COMMANDS. A blocked actuator
cannot count on that (where no other actuator runs, nothing would ever take the command), and it is
the one component allowed to write, so it applies its Event commands directly: through the same
policy and the same preconditioned write path as any command it takes from the bus.
"""

from __future__ import annotations

import time

from corral_actuator.actuator import Actuator
from corral_actuator.config import ActuatorConfig, policy_file
from corral_actuator.policy import Policy
from corral_actuator.runner import kube_api, publish_result
from corral_bus.connection import Bus
from corral_kube.client import connected
from corral_model.envelopes import Outcome
from corral_runtime.config import ServiceConfig
from corral_runtime.logs import get_logger
from corral_upgradepath.decision import GateDecision
from corral_upgradepath.live import read_cluster_view
from corral_upgradepath.startup import gate_event_commands, startup_decision


async def actuator_gate(bus: Bus, config: ServiceConfig) -> GateDecision:
    """Read the version setting and engine images live, decide, and write the Events directly."""
    if not isinstance(config, ActuatorConfig):
        raise TypeError(f"actuator_gate needs an ActuatorConfig, not {type(config).__name__}")
    log = get_logger(service=config.service, gate="upgrade-path")
    async with connected(config.kubeconfig or None) as api:
        view = await read_cluster_view(api, config.namespace)
        decision = startup_decision(view, version_check=config.upgrade_version_check)
        setting_uid = "" if view.version_setting is None else view.version_setting.metadata.uid
        commands = gate_event_commands(
            decision,
            service=config.service,
            namespace=config.namespace,
            now=time.time(),
            setting_uid=setting_uid,
        )
        kube = kube_api(api, config)
        try:
            actuator = Actuator(
                kube, Policy.load(policy_file(config)), max_command_age=config.max_command_age_s
            )
            for command in commands:
                result = await actuator.execute(command)  # Events only: no informer to close
                await publish_result(bus, result)  # audited in LH_RESULTS like every other write
                if result.outcome is not Outcome.APPLIED:
                    # The decision stands either way; a missing Event must not change it.
                    log.warning("gate Event not recorded", outcome=result.outcome, detail=result.detail)
        finally:
            await kube.close()
    return decision
