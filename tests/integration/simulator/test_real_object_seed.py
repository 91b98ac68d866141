"""A seed of real Longhorn objects (`objects:`, or a file of nothing but objects, as `corral sandbox
up --seed-file` reads it): the corpus's v1beta2 objects load as a real cluster printed them, their
literal nulls kept on nullable fields, and the sandbox comes up and runs with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral_sandbox.seeds import Seed, SeedError, load_seed, seed_from_dict
from tests.fixtures.corpus import CORPUS
from tests.fixtures.sandbox import Sandbox

VOLUME = CORPUS / "Volume" / "homelab-v1101-rwo-detached.yaml"
REPLICA = CORPUS / "Replica" / "homelab-v1101-replica-stopped-dauwalter.yaml"
V1BETA1 = CORPUS / "Setting" / "sb-v123-harvester-taint-toleration.yaml"
VOLUME_NAME = "pvc-1b1760aa-d44d-4f64-aed8-53fb965dcb75"


def objects_file(tmp_path: Path, *sources: Path) -> Path:
    """The corpus files as one multi-document YAML file (headers and all)."""
    path = tmp_path / "objects.yaml"
    path.write_text("\n---\n".join(source.read_text() for source in sources))
    return path


@pytest.fixture
def sandbox_seed(tmp_path: Path) -> Seed:
    objects = load_seed(objects_file(tmp_path, VOLUME, REPLICA)).objects
    return seed_from_dict(
        {
            "nodes": [{"name": n} for n in ("dauwalter", "kipsang", "fordyce")],
            "engineImages": [{"image": "longhornio/longhorn-engine:v1.10.1", "default": True}],
            "objects": list(objects),
        },
        "real-objects",
    )


def test_a_file_of_objects_is_a_seed_of_the_default_cluster_plus_them(tmp_path: Path) -> None:
    seed = load_seed(objects_file(tmp_path, VOLUME, REPLICA))
    assert [(o["kind"], o["metadata"]["name"]) for o in seed.objects] == [
        ("Volume", VOLUME_NAME),
        ("Replica", f"{VOLUME_NAME}-r-b801ffa9"),
    ]
    assert len(seed.nodes) == 3


def test_v1beta1_objects_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(SeedError, match=r"objects\[0\]: longhorn.io/v1beta1"):
        load_seed(objects_file(tmp_path, V1BETA1))


async def test_the_sandbox_comes_up_with_real_objects(sandbox: Sandbox) -> None:
    replica = await sandbox.get("replicas", f"{VOLUME_NAME}-r-b801ffa9")
    # as printed by the real cluster: the sandbox adds nothing to the spec
    assert replica["spec"]["volumeName"] == VOLUME_NAME
    assert replica["metadata"]["labels"]["longhorn.io/backing-image"] == ""
    volume = await sandbox.get("volumes", VOLUME_NAME)
    assert volume["spec"]["Standby"] is False and isinstance(volume["spec"]["size"], str)

    async def grown() -> dict[str, Any] | None:
        engine = await sandbox.find("engines", f"{VOLUME_NAME}-e-0")
        replicas = await sandbox.replicas_of(VOLUME_NAME)
        wanted = int(volume["spec"]["numberOfReplicas"])
        return engine if engine and len(replicas) == wanted else None

    engine = await sandbox.wait_for(grown, what="the simulator gave the real volume its engine and replicas")
    await sandbox.patch("volumes", VOLUME_NAME, {"spec": {"nodeID": "kipsang"}})
    attached = await sandbox.wait_volume(
        VOLUME_NAME, lambda v: v.get("status", {}).get("state") == "attached", what="the real volume attached"
    )
    assert attached["status"]["currentNodeID"] == "kipsang"
    assert engine["status"]["replicaModeMap"] is None, "a stopped engine, as Longhorn serializes it"
