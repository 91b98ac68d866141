"""The corral command line: plan, replay, pre-upgrade, sandbox, run."""
