"""The matrix: every (service, state, fault) cell, and how one cell runs.

A cell builds its own world (world.py), brings the service into the state (the spec's trap fires
on the write entering it and freezes the simulated Longhorn there), injects the fault, holds it
until the cluster's reaction reached the bus, clears it, and then judges:

* safety: no rule of safety.py (or the spec's own) broken at any write, from start to end;
* liveness: within `RECOVER_S` of the clearing, the service finished (the spec's `progress`), or
  the cell fails saying what was still missing and what the service showed about it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from kubernetes_asyncio.client import ApiException

from tests.explore.faults import CATALOGUE, FAULTS, STATIC_LACKS
from tests.explore.model import Cell, NotExpressible, Outcome, Verdict
from tests.explore.services import Explored
from tests.explore.services.engine_upgrade import EngineUpgrade
from tests.explore.services.im_restart import ImRestart
from tests.explore.services.setting_sync import SettingSync
from tests.explore.services.v2_upgrade import V2Upgrade
from tests.explore.world import World, open_world
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import WaitTimeout

SPECS: dict[str, type[Explored]] = {
    spec.name: spec for spec in (EngineUpgrade, ImRestart, SettingSync, V2Upgrade)
}

REACH_S = 60.0
"""How long a service may take to reach the state (the work is seconds of simulated time)."""
HOLD_S = 2.0
"""The most a fault is held: until the cluster's reaction reached the bus and the actuator answered
`HOLD_RESULTS` commands decided since (the service acted under the fault, a step or two), or this
long when it holds still."""
HOLD_RESULTS = 3
ATOMIC = {"node-notready": ("instancemanagers", "pods")}
"""Faults that land with the state, before a write the service decides on entering it: the API
server holds back those resources' writes from the trap's instant until the fault is in (a
NotReady node the service met on entering a step must stop that step's IM delete)."""
LONG_HOLDS = {"node-notready": (5.0, 10)}
"""Faults a service must wait out, not merely survive: held longer (seconds, results), so a service
that carries on under them shows it (issue 24 saw v2-upgrade delete an IM 1.1 s into NotReady)."""
RECOVER_S = 10.0
"""The liveness bound: from the fault's clearing to the service finished (a spec may set its own:
a v2 upgrade has three nodes still to go). Simulated steps take hundredths of a second, so a
service that recovers does so in a second or two."""


def refusal(error: ApiException) -> str:
    """An admission webhook's refusal of a write, as its message ("" for any other API error): a
    fault a real cluster refuses too. (Any status: the v2 webhook answers 500 when it cannot judge.)"""
    try:
        message = str(json.loads(str(error.body)).get("message", ""))
    except (ValueError, AttributeError):
        return ""
    return message if "admission webhook" in message else ""


def cells() -> Iterator[Cell]:
    for name, spec in SPECS.items():
        for state in spec.states:
            for fault in FAULTS:
                yield Cell(name, state, fault)


async def _seqs(world: World) -> tuple[int, int]:
    """Where LH_OBJECTS and LH_RESULTS stand now."""
    objects = await world.bus.js.stream_info("LH_OBJECTS")
    results = await world.bus.js.stream_info("LH_RESULTS")
    return int(objects.state.last_seq), int(results.state.last_seq)


async def run_cell(cell: Cell, nats: NatsServer) -> Verdict:
    began = time.monotonic()
    verdict = await _run(cell, nats)
    verdict.elapsed_s = time.monotonic() - began
    return verdict


async def _run(cell: Cell, nats: NatsServer) -> Verdict:
    if cell.fault in STATIC_LACKS:
        return Verdict(cell, Outcome.NOT_EXPRESSIBLE, STATIC_LACKS[cell.fault])
    spec = SPECS[cell.service]()
    inject = CATALOGUE[cell.fault]
    async with open_world(spec, nats, as_process=cell.fault == "kill-9") as world:
        sandbox, safety = world.sandbox, world.safety

        async def safe() -> None:
            broken = safety.violations + await spec.violations(world)
            assert not broken, "\n".join(broken)

        await spec.prepare(world)
        safety.judging = True
        trap = spec.arm(world, cell.state)
        trap.hold_writes = list(ATOMIC.get(cell.fault, ()))
        await spec.start(world, cell.state)

        async def reached() -> bool:
            return trap.fired.is_set()

        try:
            await sandbox.wait_for(reached, within=REACH_S, what=f"state {cell.state}", invariant=safe)
        except (WaitTimeout, AssertionError) as error:
            return Verdict(
                cell, Outcome.FAIL, f"before the fault: {error}", known=spec.known(cell, str(error))
            )
        world.target.update(trap.target)
        mark = await _seqs(world)
        try:
            clear = await inject(world)
        except NotExpressible as lacking:
            return Verdict(cell, Outcome.NOT_EXPRESSIBLE, str(lacking))
        except ApiException as error:
            if refusal(error):
                return Verdict(cell, Outcome.NOT_EXPRESSIBLE, f"the API server refuses it: {refusal(error)}")
            return Verdict(cell, Outcome.FAIL, f"the fault could not be injected: {error!r}"[:600])
        except Exception as error:  # the explorer's own failure: recorded, never passed
            return Verdict(cell, Outcome.FAIL, f"the fault could not be injected: {error!r}"[:600])
        finally:
            trap.thaw()

        hold_s, hold_results = LONG_HOLDS.get(cell.fault, (HOLD_S, HOLD_RESULTS))

        async def acted() -> bool:
            now = await _seqs(world)
            return now[0] > mark[0] and now[1] >= mark[1] + hold_results

        try:
            await sandbox.wait_for(acted, within=hold_s, interval=0.05, what="a decision under the fault")
        except WaitTimeout:
            pass  # the service held still under the fault (or the fault is one the bus cannot show)
        except AssertionError:
            pass  # the bus itself is the fault (NATS restarting): its seq cannot be read for a moment
        refused = ""
        try:
            await clear()
        except ApiException as error:
            if not refusal(error):
                raise
            # undoing it is refused (a webhook guarding the upgrade): the fault's effect stays
            refused = f" (undoing the fault was refused: {refusal(error)})"
        await spec.after_clear(world, cell.state)
        cleared = time.monotonic()
        last = [""]

        async def finished() -> bool:
            progress = await spec.progress(world)
            last[0] = progress.says
            return progress.done

        recover: float | None = None
        failure = ""
        try:
            await sandbox.wait_for(
                finished, within=spec.recover_s or RECOVER_S, interval=0.05, what="finish", invariant=safe
            )
            recover = time.monotonic() - cleared
            failure = await spec.after_finish(world)
        except WaitTimeout:
            failure = f"not finished {spec.recover_s or RECOVER_S:.0f}s after the fault cleared: {last[0]}"
        except AssertionError as error:
            failure = f"safety: {error}"
        broken = safety.violations + await spec.violations(world) + await safety.applied_twice(world.bus)
        if broken and not failure.startswith("safety"):
            failure = "safety: " + "\n".join(broken) + (f"\n{failure}" if failure else "")
        if failure.startswith("safety") and safety.pod_deletes:
            failure += f"\ncorral's pod writes applied: {safety.pod_deletes}"
        if failure:
            return Verdict(cell, Outcome.FAIL, failure + refused, recover, spec.known(cell, failure))
        return Verdict(cell, Outcome.PASS, refused.strip(" ()"), recover)
