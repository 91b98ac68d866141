"""The seed file format: what it accepts, how it refuses, and what a seed expands to."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_sandbox.seeds import (
    DEFAULT_SEED_FILE,
    SeedError,
    all_volumes,
    base_objects,
    default_seed,
    parse_seed,
    resized,
)


def test_the_default_seed_is_a_three_node_cluster_with_auto_upgrade_off() -> None:
    seed = default_seed()
    assert [n.name for n in seed.nodes] == ["node-1", "node-2", "node-3"]
    assert seed.default_engine_image == "longhornio/longhorn-engine:v1.10.0"
    settings = {o["metadata"]["name"]: o["value"] for k, o in base_objects(seed) if k == "setting"}
    assert settings["concurrent-automatic-engine-upgrade-per-node-limit"] == "0"
    assert settings["default-engine-image"] == seed.default_engine_image
    assert settings["current-longhorn-version"] == "v1.10.0"
    assert settings["taint-toleration"] == ""  # danger-zone defaults are present
    assert not seed.image_profiles["longhornio/longhorn-engine:v1.10.0-wrong"].working
    assert DEFAULT_SEED_FILE.exists()


def test_resized_and_generated_volumes_are_deterministic() -> None:
    seed = resized(default_seed(), nodes=5, volumes=20, rng_seed=4)
    volumes = all_volumes(seed)
    assert len(seed.nodes) == 5 and len(volumes) == 20
    assert volumes == all_volumes(resized(default_seed(), nodes=5, volumes=20, rng_seed=4))
    attached = [v for v in volumes if v.attached_to]
    assert len(attached) == 10 and {v.attached_to for v in attached} <= {n.name for n in seed.nodes}


def test_explicit_volumes_and_node_lists(tmp_path: Path) -> None:
    seed = parse_seed(
        """
nodes: [{name: a, cpu: "8"}, b]
engineImages: [{image: "img:1", default: true}, "img:2"]
volumes:
  - {name: data, replicas: 2, size: 5Gi, attachedTo: a}
settings: {concurrent-automatic-engine-upgrade-per-node-limit: 3}
"""
    )
    volume = next(o for k, o in base_objects(seed) if k == "volume")
    assert volume["spec"]["size"] == str(5 * 2**30) and volume["spec"]["nodeID"] == "a"
    kinds = [k for k, _ in base_objects(seed)]
    assert kinds.count("engineimage") == 2 and kinds.index("engineimage") < kinds.index("volume")
    assert seed.settings["concurrent-automatic-engine-upgrade-per-node-limit"] == "3"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: 3\nbogus: 1", "unknown keys ['bogus']"),
        ("engineImages: [{image: a, default: true}, {image: b, default: true}]", "exactly one engine image"),
        ("engineImages: [{image: a}]", "exactly one engine image"),
        ("volumes: [{name: v, attachedTo: node-9}]", "not a node of this seed"),
        ("volumes: [{name: v, replicas: 0}]", "at least 1"),
        ("volumes: [{name: v, dataEngine: v3}]", "dataEngine must be v1 or v2"),
        ("imageProfiles: {img: {cliAPIVersion: high}}", "must be an integer"),
        ("nodes: [", "not valid YAML"),
        ("- a list", "must be a mapping"),
    ],
)
def test_bad_seeds_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(SeedError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_seed(text)
