"""The `make run` demo cluster is what the README promises: volumes on an old engine image, the
per-node limit on, a few volumes held back on purpose, and a profile for the image the demo brings."""

from __future__ import annotations

from corral_cli.commands.run import sandbox_options
from corral_cli.demo.show import DEMO_IMAGE
from corral_cli.main import build_parser
from corral_sandbox.seeds import all_volumes, demo_seed, resized


def test_the_demo_cluster() -> None:
    seed = demo_seed()
    volumes = all_volumes(seed)
    assert (len(seed.nodes), len(volumes)) == (4, 32)
    assert seed.default_engine_image == "longhornio/longhorn-engine:v1.10.0" != DEMO_IMAGE
    assert {v.image or seed.default_engine_image for v in volumes} == {seed.default_engine_image}
    assert seed.settings["concurrent-automatic-engine-upgrade-per-node-limit"] == "2"
    assert DEMO_IMAGE in seed.image_profiles
    held_back = {v.name for v in volumes if v.replicas > len(seed.nodes) or v.standby}
    held_back |= {v.name for v in volumes if v.data_locality == "strict-local"}
    assert held_back == {"pvc-degraded", "pvc-dr-standby", "pvc-strict-local"}
    assert 10 <= sum(1 for v in volumes if v.attached_to) <= 22  # live and offline upgrades both


def test_a_small_demo_keeps_its_held_back_volumes() -> None:
    small = all_volumes(resized(demo_seed(), nodes=2, volumes=10))
    assert len(small) == 10
    assert {"pvc-degraded", "pvc-dr-standby"} <= {v.name for v in small}


def test_corral_run_passes_the_demo_and_its_knobs_to_the_sandbox() -> None:
    args = build_parser().parse_args(["run", "--nodes", "2", "--live-upgrade-seconds", "1"])
    assert sandbox_options(args, demo=True) == ["--demo", "--nodes", "2", "--live-upgrade-seconds", "1.0"]
    args = build_parser().parse_args(["run", "--no-demo"])
    assert args.no_demo and sandbox_options(args, demo=False) == []
