"""The pipeline bench's load: one change in a hundred makes a volume eligible, and a volume that
turned healthy is never changed again (else the churn would overwrite the actuator's patch)."""

from __future__ import annotations

from bench.pipeline_cluster import Churn, base_objects, volume


def test_the_eligible_share_holds_across_small_batches() -> None:
    churn = Churn(volumes=1_000, nodes=10)
    healthy: list[str] = []
    for _ in range(400):
        changed, flipped = churn.changes(5, 0.01)
        assert len(changed) == 5
        healthy += flipped
    assert len(healthy) == 20  # 2 000 changes at 1 %


def test_a_volume_turned_healthy_is_never_changed_again() -> None:
    churn = Churn(volumes=200, nodes=10)
    healthy: set[str] = set()
    for _ in range(100):
        changed, flipped = churn.changes(20, 0.05)
        assert not healthy & {obj["metadata"]["name"] for obj in changed}
        for obj in changed:
            robust = obj["status"]["robustness"]
            assert (robust == "healthy") == (obj["metadata"]["name"] in flipped)
        healthy.update(flipped)


def test_every_volume_starts_degraded_on_the_old_image_with_the_new_default() -> None:
    obj = volume(7, nodes=10)
    assert obj["status"]["robustness"] == "degraded"
    assert obj["spec"]["image"] == obj["status"]["currentImage"]
    settings = {s["metadata"]["name"]: s["value"] for s in base_objects(10)[("longhorn.io", "settings")]}
    assert settings["default-engine-image"] != obj["spec"]["image"]
