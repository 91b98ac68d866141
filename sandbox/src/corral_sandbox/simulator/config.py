"""The simulator's knobs: durations, image profiles, limits. One frozen object, so a scenario states
its whole simulated world up front and a seeded run with the same config replays identically.

Durations are in *simulated* seconds (see clock.py); tests set them to fractions of a second.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ManagerVersions:
    """The engine API constants vendored into the (simulated) longhorn-manager: the v1.10.0 row of
    §1.1, matching the Longhorn version the sandbox's clusters run (`current-longhorn-version`), so
    that this corral build (v1.11.0) finds a supported upgrade path in them."""

    cli_api_version: int = 10
    cli_api_min_version: int = 8
    controller_api_version: int = 5
    controller_api_min_version: int = 4


@dataclass(frozen=True)
class ImageProfile:
    """What `longhorn version --client-only` would report for an engine image, plus how it behaves.

    `working=False` is the "compatible but non-working" class: it deploys and passes every check, but a
    live upgrade to it never completes (the engine never reports the new image).

    A "bad image" works on some volumes only: a live upgrade to it stalls the same way on the volumes
    named in `stalls_on`, and on a share `stall_share` of the others, picked by a hash of the volume
    and image names (so a seeded cluster stalls on the same volumes every run). An offline upgrade
    re-images the engine and replicas without running them, so it completes, as Longhorn's does.
    """

    version: str = "v1.10.0"
    git_commit: str = ""
    cli_api_version: int = 10
    cli_api_min_version: int = 8
    controller_api_version: int = 5
    controller_api_min_version: int = 4
    data_format_version: int = 1
    data_format_min_version: int = 1
    working: bool = True
    undeployed_nodes: frozenset[str] = frozenset()
    stall_share: float = 0.0
    stalls_on: frozenset[str] = frozenset()

    def stalls(self, volume: str, image: str) -> bool:
        """A live upgrade of `volume` to `image` (this profile's) never completes."""
        if not self.working or volume in self.stalls_on:
            return True
        if self.stall_share <= 0.0:
            return False
        digest = hashlib.sha1(f"{volume}\0{image}".encode()).digest()
        return int.from_bytes(digest[:4]) / 2**32 < self.stall_share

    def commit_for(self, image: str) -> str:
        """The git commit reported: the profile's, or one derived from the image so images differ."""
        return self.git_commit or hashlib.sha1(image.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SimConfig:
    """Everything that shapes the simulated Longhorn data plane.

    * `seed` feeds the one RNG (replica names, placement ties, pod IPs).
    * `images` maps an engine-image string to its profile; an unknown image gets `default_profile`
      (compatible, working, with a git commit derived from the image string).
    * `non_working_images` is a shortcut for profiles with `working=False`.
    """

    namespace: str = "longhorn-system"
    seed: int = 0
    manager: ManagerVersions = ManagerVersions()
    images: dict[str, ImageProfile] = field(default_factory=dict)
    default_profile: ImageProfile = ImageProfile()
    non_working_images: frozenset[str] = frozenset()
    # engine-image DaemonSet: time for one node's pod to become ready
    engine_image_deploy_seconds: float = 0.05
    # engine-image expiry after refCount 0 (non-default images only); None disables it
    engine_image_expiry_seconds: float | None = 3600.0
    # an engine/replica process start and stop inside its instance manager
    instance_start_seconds: float = 0.02
    instance_stop_seconds: float = 0.0
    # total duration of one v1 live engine upgrade (half to start the new replicas, half to switch)
    live_upgrade_seconds: float = 0.2
    # an offline upgrade re-images engine and replicas after this delay
    offline_upgrade_seconds: float = 0.0
    # one replica rebuild, once it got a slot under concurrent-replica-rebuild-per-node-limit
    rebuild_seconds: float = 0.2
    # a failed replica is deleted this long after it failed (Longhorn's staleReplicaTimeout)
    stale_replica_seconds: float = 0.5
    # volume expansion stays pending (expansionRequired) this long
    expansion_seconds: float = 0.2
    # DR / restore: restoreRequired stays true this long
    restore_seconds: float = 0.2
    # live migration: currentMigrationNodeID follows spec.migrationNodeID after this delay
    migration_seconds: float = 0.05
    # instance-manager pod: Pending → Running/ready after this delay
    im_startup_seconds: float = 0.05
    # per-IM back-off before the simulated IM controller recreates a deleted pod
    im_recreate_backoff_seconds: float = 0.0
    # whether the simulated IM controller deletes a failed IM pod itself (§4.3 step 7, Longhorn's
    # handlePod); off when corral's im-restart plays that part, so a scenario tests corral's
    im_delete_failed_pods: bool = True
    # allocatable CPU (millicpu) assumed for a kube node that does not say
    default_node_millicpu: int = 4000
    # SIM-K8S (kube_workloads.py): Longhorn's DaemonSets/Deployments, their rollouts, the scheduler,
    # share-manager and backing-image-manager pods, VolumeAttachments, longhorn-default-setting
    kube_workloads: bool = True
    # a workload or component pod: scheduled → Running/ready after this delay
    pod_startup_seconds: float = 0.05
    # replicas of each CSI sidecar Deployment (Longhorn's default is 3)
    csi_deployment_replicas: int = 3
    # one backing-image-manager pod per ready node (Longhorn runs them where backing images live)
    backing_image_managers: bool = True
    # SIM-V2 data plane (v2_engine.py, switchover.py, snapshots.py): each step of a v2 target
    # switch-over, the v2 IM pod's start-up (None: `im_startup_seconds`), a snapshot's checksum
    v2_target_create_seconds: float = 0.02
    v2_suspend_seconds: float = 0.01
    v2_switch_seconds: float = 0.02
    v2_resume_seconds: float = 0.01
    v2_im_startup_seconds: float | None = None
    snapshot_seconds: float = 0.02
    # SIM-IO: what a switch-over's I/O gap may exceed suspend + switch + resume by — the rounds
    # (a write and its watch echo each) between the steps, in simulated seconds
    io_gap_slack_seconds: float = 1.0

    @property
    def v2_im_start_seconds(self) -> float:
        """How long a v2 instance manager's pod takes to run (its own knob, else every IM's)."""
        if self.v2_im_startup_seconds is None:
            return self.im_startup_seconds
        return self.v2_im_startup_seconds

    @property
    def switchover_seconds(self) -> float:
        """The data plane's lower bound for one v2 target switch-over: the new target is created,
        then the initiator suspends, switches and resumes (each a configured duration)."""
        return (
            self.v2_target_create_seconds
            + self.v2_suspend_seconds
            + self.v2_switch_seconds
            + self.v2_resume_seconds
        )

    @property
    def switchover_io_gap_budget(self) -> float:
        """The longest I/O gap one switch-over may cause (SIM-IO): suspended from the request to the
        resume, plus the rounds between those steps (`io_gap_slack_seconds`)."""
        return (
            self.v2_suspend_seconds
            + self.v2_switch_seconds
            + self.v2_resume_seconds
            + self.io_gap_slack_seconds
        )

    def profile(self, image: str) -> ImageProfile:
        profile = self.images.get(image, self.default_profile)
        if image in self.non_working_images and profile.working:
            from dataclasses import replace

            profile = replace(profile, working=False)
        return profile
