"""`python -m corral_watcher`: the watcher under the service harness (config from CORRAL_* variables)."""

from __future__ import annotations

from corral_runtime import run_service
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main

if __name__ == "__main__":
    raise SystemExit(run_service("watcher", WatcherConfig, main))
