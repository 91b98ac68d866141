"""What the engine-upgrade scenarios observe in the emulator, and the invariants they assert."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.fixtures.sandbox import Sandbox

LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
DEFAULT_SETTING = "default-engine-image"


def upgrading(volume: dict[str, Any]) -> bool:
    """Longhorn's "in progress": spec.image != status.currentImage (§1.1)."""
    return bool(volume["spec"].get("image", "") != volume.get("status", {}).get("currentImage", ""))


class Observer:
    """Polls the volumes and keeps what every observation showed, for invariants along the way."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.max_in_flight: Counter[str] = Counter()
        self.observations = 0

    async def volumes(self) -> list[dict[str, Any]]:
        return await self.sandbox.list("volumes")

    async def in_flight(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for volume in await self.volumes():
            if upgrading(volume):
                counts[volume.get("status", {}).get("ownerID", "")] += 1
        self.observations += 1
        for node, count in counts.items():
            self.max_in_flight[node] = max(self.max_in_flight[node], count)
        return counts

    def limit_holds(self, limit: int) -> Any:
        async def invariant() -> None:
            counts = await self.in_flight()
            over = {node: n for node, n in counts.items() if n > limit}
            assert not over, f"in flight over the limit {limit}: {over}"

        return invariant

    async def images(self) -> dict[str, str]:
        return {v["metadata"]["name"]: v["spec"].get("image", "") for v in await self.volumes()}

    async def all_on(self, image: str, names: set[str]) -> bool:
        volumes = {v["metadata"]["name"]: v for v in await self.volumes()}
        return all(
            volumes[n]["spec"].get("image") == image
            and volumes[n].get("status", {}).get("currentImage") == image
            for n in names
            if n in volumes and volumes[n].get("status", {}).get("state") == "attached"
        ) and all(volumes[n]["spec"].get("image") == image for n in names if n in volumes)
