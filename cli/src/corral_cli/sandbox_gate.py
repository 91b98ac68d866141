"""Whether the sandbox is installed, and the one line the sandbox's commands say where it is not.

Production's image (deploy/image/Dockerfile, default target) leaves the sandbox package out:
nothing a deployment runs needs a Kubernetes emulator, and the demo makes a Longhorn upgrade
happen in whatever cluster it is pointed at. `corral sandbox …`, `corral run` (with its sandbox) and
`corral demo` ask here first and, without it, name the image that has them instead of failing
with an ImportError somewhere inside. Every other command and every service never imports the
sandbox (tests/unit/cli/test_sandbox_gate.py holds them to that).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import IO

SANDBOX_MODULE = "corral_sandbox"
SANDBOX_IMAGE = "corral/corral-sandbox"
EXIT_NO_SANDBOX = 2


def sandbox_installed() -> bool:
    """The sandbox package is importable (a checkout, the sandbox image, corral-cli[sandbox])."""
    try:
        return importlib.util.find_spec(SANDBOX_MODULE) is not None
    except (ImportError, ValueError):
        return False


def missing_sandbox(command: str) -> str:
    """The one line that says the sandbox is not here and where it is."""
    return (
        f"corral {command}: the sandbox is not in this image (production's image leaves it out);"
        f" use the {SANDBOX_IMAGE} image (deploy/image/Dockerfile --target sandbox, `make image`)"
        " or install corral-cli[sandbox]"
    )


def refuse_without_sandbox(command: str, err: IO[str] | None = None) -> int | None:
    """None where the sandbox is installed; else say so on stderr and return the exit status."""
    if sandbox_installed():
        return None
    print(missing_sandbox(command), file=err if err is not None else sys.stderr)
    return EXIT_NO_SANDBOX
