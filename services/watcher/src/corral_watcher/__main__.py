"""`python -m corral_watcher`: the watcher under the service harness (config from CORRAL_* variables)."""

from __future__ import annotations

import sys

from corral_runtime import run_service
from corral_upgradepath.hooks import live_gate
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main


def run() -> int:
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
