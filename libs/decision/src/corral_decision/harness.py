"""A decision service under the runtime harness: the `main(ctx)` it runs and the `__main__` call.

A service's `__main__` is one line, `raise SystemExit(run(DEFINITION))`; tests and `corral run` in
one process call `serve_main(definition)` to get the same body with a hook on its runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral_decision.runner import BOOTSTRAP, DecisionRunner
from corral_decision.service import DecisionService
from corral_runtime import run_service
from corral_runtime.service import ServiceContext, ServiceMain

OnRunner = Callable[[DecisionRunner], None]


def service_main(service: DecisionService[Any], on_runner: OnRunner | None = None) -> ServiceMain[Any]:
    """The body the runtime harness runs; `on_runner(runner)` lets an embedding look at the runner."""

    async def main(ctx: ServiceContext[Any]) -> None:
        leadership = ctx.leadership
        runner = DecisionRunner(
            service,
            ctx.bus,
            ctx.config,
            ctx.log,
            ctx.metrics,
            is_leader=lambda: ctx.is_leader,
            lease_term=lambda: leadership.term if leadership is not None else 0,
            tracer=ctx.tracer,
        )
        if on_runner is not None:
            on_runner(runner)
        # Not ready while it refuses to double-drive beside longhorn-manager (mode act, Longhorn's
        # loop on): the operator asked it to act and it cannot (coexistence.py).
        ctx.readiness.probe("coexistence", lambda: not runner.coexistence.refusing)
        if leadership is not None:
            leadership.on_change(runner.leadership_changed)
        await runner.run(ctx.stop, on_bootstrapped=lambda: ctx.readiness.mark(BOOTSTRAP))

    return main


def run(service: DecisionService[Any]) -> int:
    """`python -m corral_<service>`: configuration from CORRAL_* variables, one leader, ready once
    bootstrapped, its start-up hooks (the upgrade-path gate) first."""
    return run_service(
        service.name,
        service.config,
        service_main(service),
        leader_election=True,
        ready_when=[BOOTSTRAP],
        startup=service.startup,
    )
