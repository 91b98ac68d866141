"""`python -m corral_watcher`: the watcher under the service harness (config from CORRAL_* variables)."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from corral_runtime import run_service
from corral_upgradepath.hooks import live_gate
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main


def run() -> int:
    # Measured with bench/bench_watcher.py: about a tenth less CPU per event than asyncio's own loop.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return run_service(
        "watcher",
        WatcherConfig,
        main,
        ready_when=["synced"],
        # The bus view depends on the watcher, so its gate reads the version setting and engine
        # images live from the API server, not from the bus.
        startup=[live_gate],
    )


if __name__ == "__main__":
    sys.exit(run())
