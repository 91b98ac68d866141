"""`python -m corral_im_restart`: the im-restart decision service on the kit's runner
(configuration from CORRAL_* variables; see service.ImRestartConfig)."""

from __future__ import annotations

from corral_decision import run
from corral_im_restart.service import DEFINITION

if __name__ == "__main__":
    raise SystemExit(run(DEFINITION))
