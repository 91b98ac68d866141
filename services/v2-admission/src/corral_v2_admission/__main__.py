"""`python -m corral_v2_admission`: the webhook server, configured by CORRAL_* variables (config.py)."""

from __future__ import annotations

import sys

from corral_runtime import ConfigError, configure_logging, load_config
from corral_v2_admission.config import AdmissionConfig
from corral_v2_admission.runner import run

EXIT_BAD_CONFIG = 2


def main() -> int:
    try:
        config = load_config(AdmissionConfig)
    except ConfigError as error:
        print(f"v2-admission: {error}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    return run(config, configure_logging("v2-admission", config.log_level))


if __name__ == "__main__":
    sys.exit(main())
