"""A minimal service on the runtime harness, run as a real process by test_runtime_harness.py.

It declares a `bootstrap` readiness condition and marks it once connected, then holds one piece of
"in-flight work" until stop is requested; finishing that work publishes `corral.test.<instance>.done`
so the test can see that the work completed over a still-open connection before the process exited.
"""

from __future__ import annotations

import asyncio

from corral_runtime import ServiceConfig, ServiceContext, run_service


class DemoConfig(ServiceConfig, frozen=True, kw_only=True):
    finish_s: float = 0.2


async def main(ctx: ServiceContext[DemoConfig]) -> None:
    ctx.readiness.mark("bootstrap")
    ctx.log.info("demo ready", leader=ctx.is_leader)
    await ctx.stop.wait()
    ctx.log.info("demo finishing in-flight work")
    await asyncio.sleep(ctx.config.finish_s)  # the work itself; a real service acks or naks here
    await ctx.bus.nc.publish(f"corral.test.{ctx.config.instance}.done", b"finished")


if __name__ == "__main__":
    import os

    raise SystemExit(
        run_service(
            "demo",
            DemoConfig,
            main,
            leader_election=os.environ.get("CORRAL_LEADER") == "true",
            ready_when=["bootstrap"],
        )
    )
