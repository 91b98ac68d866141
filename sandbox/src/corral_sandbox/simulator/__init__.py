"""The Longhorn simulator: plays the Longhorn controllers corral does not replace (engine images,
volumes and their engine upgrades, replicas and rebuilds, instance managers and their pods) as a
real client of the API server. See runner.Simulator for the entry point and config.SimConfig for the
knobs."""

from corral_sandbox.simulator.clock import Clock, ManualClock, WallClock
from corral_sandbox.simulator.config import ImageProfile, ManagerVersions, SimConfig
from corral_sandbox.simulator.faults import SimFaults
from corral_sandbox.simulator.rollout import LonghornRelease, roll_out
from corral_sandbox.simulator.runner import Simulator

__all__ = [
    "Clock",
    "ImageProfile",
    "LonghornRelease",
    "ManagerVersions",
    "ManualClock",
    "SimConfig",
    "SimFaults",
    "Simulator",
    "WallClock",
    "roll_out",
]
