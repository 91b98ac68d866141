"""The setting-sync service on a real NATS server, in the test's event loop: objects in on
LH_OBJECTS, commands out on LH_COMMANDS. A group-A setting stays pending (applied=false, no pod
delete, no template patch) while a volume is attached, and its changes are issued on the detach."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from nats.aio.msg import Msg

from corral_bus import Bus
from corral_model import longhorn as lh
from corral_model.envelopes import Command, Outcome, Verb
from corral_setting_sync.service import DEFINITION
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen, report
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import decision_replica
from tests.unit.setting_sync.cluster import NS, component_pod, setting, volume, workload

pytestmark = pytest.mark.integration


def _of(seen: Sequence[tuple[Msg, Command]], verb: Verb) -> list[Command]:
    return [c for _, c in seen if c.verb is verb]


async def test_a_group_a_setting_waits_for_the_detach_then_applies(bus: Bus, nats_server: NatsServer) -> None:
    objects = FakeWatcher(bus, NS)
    priority = setting("priority-class", "high-priority", applied=True)
    await objects.put(
        workload(lh.Deployment, "csi-attacher"),
        component_pod("instance-manager-n1"),
        volume("pvc-a", "attached"),
        priority,
    )
    await objects.resync(["daemonset", "deployment", "instancemanager", "node", "pod", "setting", "volume"])
    await FakeWatcher(bus, "", rv=10_000).resync(["kubenode"])

    async with commands_seen(bus, "setting-sync") as seen:
        replica = decision_replica(DEFINITION, nats_server.url, "ss-1")
        try:
            await eventually(lambda: _of(seen, Verb.PATCH_STATUS), what="applied=false")
            [pending] = _of(seen, Verb.PATCH_STATUS)
            assert pending.target.name == "priority-class"
            assert pending.changes[0].value is False
            assert seen[-1][0].subject.startswith("lh.cmd.setting-sync.setting.")
            await report(bus, pending, Outcome.APPLIED, "setting")
            assert replica.runner is not None
            [why] = replica.runner.decider.explain("Setting/longhorn-system/priority-class")
            assert (why.reason, why.detail) == ("attached-volumes", "1 attached volume: pvc-a")

            # More traffic while attached, then a marker whose own status write proves the decider
            # has read past it: still no delete and no patch.
            await objects.put(volume("pvc-b", "detached"), component_pod("instance-manager-n2"))
            await objects.put(setting("storage-over-provisioning-percentage", "100"))
            await eventually(lambda: len(_of(seen, Verb.PATCH_STATUS)) == 2, what="the marker's write")
            assert _of(seen, Verb.DELETE) == [] and _of(seen, Verb.PATCH) == []

            await objects.put(volume("pvc-a", "detached"))
            await eventually(lambda: _of(seen, Verb.DELETE), what="the pod delete after the detach")
            await eventually(lambda: _of(seen, Verb.PATCH), what="the template patch after the detach")
            await eventually(lambda: len(_of(seen, Verb.DELETE)) == 2, what="both pod deletes")
            assert sorted(c.target.name for c in _of(seen, Verb.DELETE)) == [
                "instance-manager-n1",
                "instance-manager-n2",
            ]
            [patch] = _of(seen, Verb.PATCH)
            assert patch.target.name == "csi-attacher"
            assert {c.path: c.value for c in patch.changes} == {
                "/spec/template/spec/priorityClassName": "high-priority"
            }
        finally:
            await replica.stop()
