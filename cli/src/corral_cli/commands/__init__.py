"""Sub-commands of `corral`, one module each (see corral_cli.main)."""
