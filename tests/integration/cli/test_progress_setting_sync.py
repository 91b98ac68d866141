"""`corral progress setting-sync` as an operator runs it, against a real NATS server: from the
events a watcher would publish, it prints the pending setting, what blocks it and the components on
the old value, follows the detach and the components changing, and exits 0 once it is applied."""

from __future__ import annotations

import asyncio

import pytest

from corral_bus import Bus
from corral_model import longhorn as lh
from tests.fixtures.bus_traffic import FakeWatcher
from tests.fixtures.nats import NatsServer
from tests.integration.cli.test_progress_command import DEADLINE_S, followed_progress
from tests.unit.setting_sync.cluster import NS, component_pod, setting, volume, workload

pytestmark = pytest.mark.integration
PRIORITY = {"priority-class": "high-priority"}


async def test_pending_blocked_then_applied(bus: Bus, nats_server: NatsServer) -> None:
    objects = FakeWatcher(bus, NS)
    await objects.put(
        workload(lh.Deployment, "csi-attacher"),
        component_pod("instance-manager-n1"),
        volume("pvc-a", "attached"),
        setting("priority-class", "high-priority"),
    )
    kinds = ["daemonset", "deployment", "instancemanager", "node", "pod", "setting", "volume"]
    await objects.resync(kinds)
    await FakeWatcher(bus, "", rv=10_000).resync(["kubenode"])

    async with followed_progress("setting-sync", nats_server.url) as lines:
        await lines.until(r"setting-sync: 1 danger-zone setting pending")
        await lines.until(
            r" priority-class +limit 0  in flight 0  done 0  waiting 0  blocked 2 \(attached-volumes 2\)"
        )
        await lines.until(
            r"priority-class: attached-volumes: 1 attached volume: pvc-a; 2 components on the old value:"
            r" Deployment/csi-attacher, Pod/instance-manager-n1"
        )
        await objects.put(volume("pvc-a", "detached"))
        await lines.until(r" priority-class +limit 0  in flight 2  done 0")
        await objects.put(
            workload(lh.Deployment, "csi-attacher", PRIORITY),
            component_pod("instance-manager-n1", values=PRIORITY),
        )
        summary = await lines.until(r"^setting-sync: every danger-zone setting applied")
        assert "components" not in summary
        assert await asyncio.wait_for(lines.proc.wait(), DEADLINE_S) == 0
