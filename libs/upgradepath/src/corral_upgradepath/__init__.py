"""The upgrade-path gate: semver rules deciding whether this build may run against the cluster.

`check_upgrade_path` is the pure decision (longhorn-behaviour.md §2.2); `check_against_build` runs
it with this build's metadata (`build.toml`); `startup` is what services call at start-up,
`snapshot` and `live` read the inputs for `corral pre-upgrade`.
"""

from corral_upgradepath.build import BuildInfo, EngineAPIVersions, build_info
from corral_upgradepath.cluster import CURRENT_VERSION_SETTING, ClusterView, cluster_view
from corral_upgradepath.decision import Check, GateDecision, GateWarning
from corral_upgradepath.gate import check_against_build, check_upgrade_path

__all__ = [
    "CURRENT_VERSION_SETTING",
    "BuildInfo",
    "Check",
    "ClusterView",
    "EngineAPIVersions",
    "GateDecision",
    "GateWarning",
    "build_info",
    "check_against_build",
    "check_upgrade_path",
    "cluster_view",
]
