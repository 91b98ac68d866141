"""The im-restart service on a real NATS server, in the test's event loop: objects in on
LH_OBJECTS (kube nodes under the cluster-scope token, as the watcher publishes them), commands
out on LH_COMMANDS. An IM turning idle with an unsynced setting gets exactly one pod delete; a
busy one gets none, only its SettingSynced condition."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from nats.aio.msg import Msg

from corral_bus import Bus
from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.service import DEFINITION
from corral_model.envelopes import Command, Outcome, Verb
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen, report
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import decision_replica
from tests.unit.im_restart.cluster import NS, im_pod, instance_manager, kube_node, ready_node, setting

pytestmark = pytest.mark.integration


def _of(seen: Sequence[tuple[Msg, Command]], verb: Verb, name: str) -> list[Command]:
    return [c for _, c in seen if c.verb is verb and c.target.name == name]


async def test_an_im_turning_idle_gets_one_delete_and_a_busy_one_none(
    bus: Bus, nats_server: NatsServer
) -> None:
    objects, cluster_scoped = FakeWatcher(bus, NS), FakeWatcher(bus, "", rv=10_000)
    defaults = DangerZoneSettings.defaults()
    nodes = {n: (ready_node(n), kube_node(n)) for n in ("node-1", "node-2")}
    busy = instance_manager("im-busy", "node-1", replicas={"r-1": "running"})
    other = instance_manager("im-other", "node-2", engines={"e-1": "starting"})
    await objects.put(*(node for node, _ in nodes.values()))
    await cluster_scoped.put(*(kube for _, kube in nodes.values()))
    for im in (busy, other):
        node, kube = nodes[im.spec.node_id]
        await objects.put(im, im_pod(im, defaults, node, kube))
    await objects.resync(["instancemanager", "node", "pod", "setting"])
    await cluster_scoped.resync(["kubenode"])

    async with commands_seen(bus, "im-restart") as seen:
        replica = decision_replica(DEFINITION, nats_server.url, "imr-1")
        try:
            await eventually(
                lambda: len(_of(seen, Verb.PATCH_STATUS, "im-busy")) == 1, what="the first condition"
            )
            await objects.put(setting("priority-class", "high-priority"))
            # Both busy: each hears why in its condition, and no pod is deleted. The first
            # condition patch is still pending (its IM did not change), so the view must move first.
            await report(bus, _of(seen, Verb.PATCH_STATUS, "im-busy")[0], Outcome.APPLIED, "instancemanager")
            await objects.put(busy, other)
            await eventually(
                lambda: len(_of(seen, Verb.PATCH_STATUS, "im-busy")) == 2, what="the False condition"
            )
            [_, not_synced] = _of(seen, Verb.PATCH_STATUS, "im-busy")
            assert "Settings [priority-class] are not synced" in str(not_synced.changes[0].value)
            assert [c for _, c in seen if c.verb is Verb.DELETE] == []

            # im-busy's last replica stops: its pod is deleted, once.
            idle = instance_manager("im-busy", "node-1", replicas={"r-1": "stopped"})
            await objects.put(idle)
            await eventually(lambda: _of(seen, Verb.DELETE, "im-busy"), what="the delete")
            [delete] = _of(seen, Verb.DELETE, "im-busy")
            assert delete.reason.startswith("settings-unsynced: priority-class")
            assert seen[-1][0].subject.startswith("lh.cmd.im-restart.")
            await objects.put(idle)  # more events for it: still the one delete

            # im-other goes idle later: its own delete proves the decider went past im-busy's events.
            await objects.put(instance_manager("im-other", "node-2", engines={"e-1": "stopped"}))
            await eventually(lambda: _of(seen, Verb.DELETE, "im-other"), what="the second delete")
            assert len(_of(seen, Verb.DELETE, "im-busy")) == 1
            assert {c.target.uid for _, c in seen if c.verb is Verb.DELETE} == {
                "pod-im-busy-1",
                "pod-im-other-1",
            }
        finally:
            await replica.stop()


async def test_a_busy_im_never_gets_a_delete_while_an_idle_neighbour_does(
    bus: Bus, nats_server: NatsServer
) -> None:
    objects, cluster_scoped = FakeWatcher(bus, NS), FakeWatcher(bus, "", rv=10_000)
    node, kube = ready_node("node-1"), kube_node("node-1")
    busy = instance_manager("im-busy", "node-1", engines={"e-1": "running"})
    idle = instance_manager("im-idle", "node-1")
    await objects.put(node, setting("storage-network", "ns/net"))
    await cluster_scoped.put(kube)
    for im in (busy, idle):
        await objects.put(im, im_pod(im, DangerZoneSettings.defaults(), node, kube))
    await objects.resync(["instancemanager", "node", "pod", "setting"])
    await cluster_scoped.resync(["kubenode"])
    async with commands_seen(bus, "im-restart") as seen:
        replica = decision_replica(DEFINITION, nats_server.url, "imr-2")
        try:
            await eventually(lambda: _of(seen, Verb.DELETE, "im-idle"), what="the idle IM's delete")
            await eventually(lambda: _of(seen, Verb.PATCH_STATUS, "im-busy"), what="the busy IM's condition")
            assert _of(seen, Verb.DELETE, "im-busy") == []
            assert replica.runner is not None
            explained = {e.name: e.reason for e in replica.runner.decider.explain()}
            assert explained == {"im-busy": "busy", "im-idle": "command-pending"}
        finally:
            await replica.stop()
