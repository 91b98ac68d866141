"""A stand-in service for test_corral_run.py: exits with code 3 on its first start, then runs until SIGTERM.

`corral run --services tests.integration.runtime.crash_once` starts it with `python -m`; the marker
file in CORRAL_TEST_MARKER_DIR remembers that the first start already happened.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

marker = Path(os.environ["CORRAL_TEST_MARKER_DIR"]) / "started-once"
if not marker.exists():
    marker.touch()
    print("crash_once: first start, exiting with 3", flush=True)
    sys.exit(3)
print("crash_once: second start, running until SIGTERM", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
