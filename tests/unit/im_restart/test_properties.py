"""Property test of the im-restart core (issue 14): random sequences of setting changes, instance
starts and stops, decisions (applied at once by a model actuator) and pod recreations.

Invariants:
* a delete never targets a busy IM (an engine or replica instance `running` or `starting`);
* a pod is deleted at most once, and once the decider is quiet no idle running IM with unsynced
  settings is left: each idle IM with unsynced settings is deleted exactly once per idle period;
* the SettingSynced condition agrees with the predicates, evaluated directly (no memo);
* the memoised judgement equals the direct one for every IM.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.core import DeciderConfig
from corral_im_restart.judge import SETTING_SYNCED, judge
from corral_im_restart.reasons import Reason
from corral_kube.patching import tokens
from corral_model import longhorn as lh
from corral_model.envelopes import Command, Verb
from tests.unit.im_restart.cluster import (
    NS,
    Cluster,
    im_pod,
    instance_manager,
    kube_node,
    ready_node,
    setting,
)

NODES = ("node-1", "node-2")
IMS = ("im-a", "im-b", "im-c")
SETTING_VALUES: dict[str, tuple[str, ...]] = {
    "priority-class": ("", "p1", "p2"),
    "storage-network": ("", "ns/net"),
    "taint-toleration": ("", "k=v:NoSchedule"),
    "instance-manager-pod-liveness-probe-timeout": ("10", "20"),
    "guaranteed-instance-manager-cpu": ("12", "20"),
}
INSTANCES = ("e-1", "r-1", "r-2")

set_op = st.tuples(st.just("set"), st.sampled_from(sorted(SETTING_VALUES)), st.integers(0, 2))
instance_op = st.tuples(
    st.just("instance"),
    st.sampled_from(IMS),
    st.sampled_from(INSTANCES),
    st.sampled_from(["running", "starting", "stopped", "error", "gone"]),
)
ops = st.lists(
    st.one_of(
        set_op,
        instance_op,
        st.tuples(st.just("decide")),
        st.tuples(st.just("recreate"), st.sampled_from(IMS)),
    ),
    max_size=40,
)


class Model:
    """The truth the decider watches, and an actuator applying its commands at once."""

    def __init__(self, config: DeciderConfig | None = None) -> None:
        self.cluster = Cluster(config)
        self.restarting: set[str] = set()
        """IMs whose pod was deleted for lagging settings and not recreated yet."""
        self.values: dict[str, str] = {}
        self.instances: dict[str, dict[str, str]] = {name: {} for name in IMS}
        self.pod_serial = 0
        self.deleted_uids: set[str] = set()
        for node in NODES:
            self.cluster.put(ready_node(node), kube_node(node))
        for i, name in enumerate(IMS):
            self.cluster.put(instance_manager(name, NODES[i % 2]))
            self.recreate(name)
        self.cluster.resync()

    @property
    def settings(self) -> DangerZoneSettings:
        return DangerZoneSettings.from_values(self.values)

    def im(self, name: str) -> lh.InstanceManager:
        im: lh.InstanceManager = self.cluster.get("instancemanager", name)
        return im

    def pod(self, name: str) -> lh.Pod | None:
        pod: lh.Pod | None = self.cluster.objects.get(("pod", name))
        return pod

    def put_im(self, name: str, **status: Any) -> None:
        im = self.im(name)
        states = self.instances[name]
        engines = {
            n: lh.InstanceProcess(status=lh.InstanceProcessStatus(state=s))
            for n, s in states.items()
            if n[0] == "e"
        }
        replicas = {
            n: lh.InstanceProcess(status=lh.InstanceProcessStatus(state=s))
            for n, s in states.items()
            if n[0] == "r"
        }
        fields = {"instance_engines": engines, "instance_replicas": replicas, **status}
        self.cluster.put(msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, **fields)))

    def recreate(self, name: str) -> None:
        """Longhorn's IM controller: a missing pod is built from the settings now in force."""
        if self.pod(name) is not None:
            return
        self.pod_serial += 1
        im = self.im(name)
        node = self.cluster.get("node", im.spec.node_id)
        kube = self.cluster.get("kubenode", im.spec.node_id)
        self.cluster.put(im_pod(im, self.settings, node, kube, uid=f"pod-{self.pod_serial}"))
        self.put_im(name, current_state="running")
        self.restarting.discard(name)

    def busy(self, name: str) -> bool:
        return any(s in ("running", "starting") for s in self.instances[name].values())

    def run(self, op: tuple[Any, ...]) -> None:
        if op[0] == "set":
            _, name, index = op
            choices = SETTING_VALUES[name]
            self.values[name] = choices[index % len(choices)]
            self.cluster.put(setting(name, self.values[name]))
        elif op[0] == "instance":
            _, im, instance, state = op
            if self.im(im).status.current_state != "running":
                return  # Longhorn clears the instance maps of an IM that does not run
            if state == "gone":
                self.instances[im].pop(instance, None)
            else:
                self.instances[im][instance] = state
            self.put_im(im)
        elif op[0] == "recreate":
            self.recreate(op[1])
        else:
            self.decide()

    def decide(self) -> int:
        commands = self.cluster.decide()
        for command in commands:
            self.actuate(command)
        return len(commands)

    def actuate(self, command: Command) -> None:
        name = command.target.name
        if command.verb is Verb.DELETE:
            assert not self.busy(name), f"deleted the pod of busy IM {name}: {self.instances[name]}"
            pod = self.pod(name)
            assert pod is not None and pod.metadata.uid == command.target.uid
            assert pod.metadata.uid not in self.deleted_uids, "a pod deleted twice"
            self.deleted_uids.add(pod.metadata.uid)
            self.restarting.add(name)
            limit = self.cluster.decider.config.max_restarts_per_node
            node_id = self.im(name).spec.node_id
            on_node = [n for n in self.restarting if self.im(n).spec.node_id == node_id]
            assert not limit or len(on_node) <= limit, f"{on_node} restarting at once on {node_id}"
            self.cluster.result(command)
            self.cluster.delete("pod", name)
            self.instances[name] = {}
            self.put_im(name, current_state="error")
        else:
            im = self.im(name)
            tested = {p.path: p.value for p in command.preconditions}
            assert tested["/metadata/resourceVersion"] == im.metadata.resource_version
            document = msgspec.json.decode(msgspec.json.encode(im))
            for change in command.changes:
                *parents, last = tokens(change.path)
                node: Any = document
                for token in parents:
                    node = node[int(token)] if isinstance(node, list) else node.setdefault(token, {})
                if isinstance(node, list):
                    node[int(last)] = change.value
                else:
                    node[last] = change.value
            self.cluster.result(command)
            self.cluster.put(msgspec.convert(document, lh.InstanceManager))

    def quiesce(self) -> None:
        for _ in range(10):
            if not self.decide():
                return
        raise AssertionError("the decider never went quiet")

    def settle(self) -> None:
        """Quiet, with every deleted pod recreated (Longhorn's controller catching up)."""
        for _ in range(len(IMS) + 1):
            self.quiesce()
            if not self.restarting:
                return
            for name in sorted(self.restarting):
                self.recreate(name)
        raise AssertionError("restarts never finished")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_restarts_are_idle_once_and_the_condition_agrees(steps: list[tuple[Any, ...]]) -> None:
    model = Model()
    model.quiesce()
    for op in steps:
        model.run(op)
    model.quiesce()
    view = model.cluster.decider.view
    for name in IMS:
        im, pod = model.im(name), model.pod(name)
        node = view.nodes.get(pod.spec.node_name) if pod is not None else None
        direct = judge(im, pod, model.settings, node, view.kube_nodes.get(im.spec.node_id))
        assert model.cluster.decider.judgement(NS, name) == direct
        assert direct.reason not in (Reason.SETTINGS_UNSYNCED, Reason.POD_FAILED), (name, direct)
        if direct.condition is not None:
            [current] = [c for c in im.status.conditions if c.type == SETTING_SYNCED]
            wanted = direct.condition
            assert (current.status, current.reason, current.message) == (
                wanted.status,
                wanted.reason,
                wanted.message,
            )
            assert (current.status == "True") == (not direct.unsynced)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_a_per_node_limit_holds_and_every_due_restart_still_happens(steps: list[tuple[Any, ...]]) -> None:
    """IMs im-a and im-c share node-1: with one restart at a time per node, the second waits for
    the first's replacement, and once everything settles no idle IM lags the settings."""
    model = Model(DeciderConfig(max_restarts_per_node=1))
    model.settle()
    for op in steps:
        model.run(op)
    model.settle()
    view = model.cluster.decider.view
    for name in IMS:
        im, pod = model.im(name), model.pod(name)
        node = view.nodes.get(pod.spec.node_name) if pod is not None else None
        direct = judge(im, pod, model.settings, node, view.kube_nodes.get(im.spec.node_id))
        assert direct.reason not in (Reason.SETTINGS_UNSYNCED, Reason.POD_FAILED), (name, direct)
