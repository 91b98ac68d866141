"""The actuator policy (deploy/policy/actuator-policy.yaml): what each service may write, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral_actuator.policy import Policy, PolicyError
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command

POLICY_FILE = Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml"
NS = "longhorn-system"
DEFAULT_IMAGE = {
    "default-engine-image": "longhornio/longhorn-engine:v1.10.0",
    "default-instance-manager-image": "longhornio/longhorn-instance-manager:v1.10.0",
}
OLD_IMAGE = "longhornio/longhorn-engine:v1.9.1"
# What engine-upgrade's core tests for an owned, detached volume (core.preconditions).
EU_TESTS = {
    "/spec/image": OLD_IMAGE,
    "/status/currentImage": OLD_IMAGE,
    "/status/state": "detached",
    "/status/ownerID": "node-1",
}
IM_LABEL = "/metadata/labels/longhorn.io~1component"
V2 = {"/spec/dataEngine": "v2"}
# What v2-upgrade's commands carry (corral_v2_upgrade.commands): the version read, v2, the node.
READ = {"/metadata/resourceVersion": "7"}
V2_ON_NODE = {**V2, "/spec/nodeID": "node-1"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(POLICY_FILE)


def cmd(
    service: str,
    verb: Verb,
    kind: str,
    changes: dict[str, Any] | None = None,
    *,
    name: str = "obj",
    namespace: str = NS,
    body: dict[str, Any] | None = None,
    preconditions: dict[str, Any] | None = None,
) -> Command:
    return new_command(
        service=service,
        verb=verb,
        target=Target(kind=kind, namespace=namespace, name=name),
        changes=tuple(FieldValue(path=p, value=v) for p, v in (changes or {}).items()),
        preconditions=tuple(FieldValue(path=p, value=v) for p, v in (preconditions or {}).items()),
        body=body,
    )


def test_engine_upgrade_may_set_the_default_engine_image(policy: Policy) -> None:
    c = cmd(
        "engine-upgrade",
        Verb.PATCH,
        "Volume",
        {"/spec/image": DEFAULT_IMAGE["default-engine-image"]},
        preconditions=EU_TESTS,
    )
    assert policy.settings_needed(c) == {"default-engine-image"}
    verdict = policy.check(c, DEFAULT_IMAGE)
    assert verdict.allowed, verdict.reason
    assert verdict.guards == ()


def test_engine_upgrade_may_not_set_any_other_image(policy: Policy) -> None:
    c = cmd("engine-upgrade", Verb.PATCH, "Volume", {"/spec/image": "evil/engine:latest"})
    verdict = policy.check(c, DEFAULT_IMAGE)
    assert not verdict.allowed and "default-engine-image" in verdict.reason
    # Without the live setting value nothing is allowed.
    assert not policy.check(c, {}).allowed


@pytest.mark.parametrize(
    "command",
    [
        cmd("engine-upgrade", Verb.PATCH, "Volume", {"/spec/numberOfReplicas": 1}),
        cmd("engine-upgrade", Verb.PATCH, "Volume", {"/spec": {"image": "x"}}),  # a parent of the field
        cmd("engine-upgrade", Verb.DELETE, "Volume"),
        cmd("engine-upgrade", Verb.PATCH_STATUS, "Volume", {"/status/currentImage": "x"}),
        cmd("setting-sync", Verb.PATCH, "Setting", {"/value": "true"}),  # settings are the operator's
        cmd("setting-sync", Verb.PATCH_STATUS, "Setting", {"/status/applied": True}, namespace="kube-system"),
        cmd("setting-sync", Verb.PATCH, "DaemonSet", {"/spec/template/spec/containers/0/image": "x"}),
        # A probe's handler runs in the (privileged) pod: only its timings are a setting's.
        *(
            cmd("setting-sync", Verb.PATCH, "DaemonSet", {path: value}, name="longhorn-csi-plugin")
            for path, value in (
                ("/spec/template/spec/containers/0/livenessProbe", {"exec": {"command": ["sh"]}}),
                ("/spec/template/spec/containers/0/livenessProbe/exec", {"command": ["sh"]}),
                ("/spec/template/spec/containers/0/livenessProbe/httpGet", {"path": "/", "port": 1}),
                ("/spec/template/spec/containers/0/readinessProbe/exec/command", ["sh"]),
                ("/spec/template/spec/containers/0/command", ["sh"]),
                ("/spec/template/spec/containers/0/startupProbe/periodSeconds", 1),
            )
        ),
        # Workloads by name only: not another DaemonSet, never corral's own Deployment.
        cmd("setting-sync", Verb.PATCH, "DaemonSet", {"/spec/template/spec/priorityClassName": "p"}),
        cmd(
            "setting-sync",
            Verb.PATCH,
            "DaemonSet",
            {"/spec/template/spec/nodeSelector": {}},
            name="kube-proxy",
        ),
        cmd(
            "setting-sync",
            Verb.PATCH,
            "Deployment",
            {"/spec/template/spec/containers/0/livenessProbe/periodSeconds": 1},
            name="corral-actuator",
        ),
        cmd("setting-sync", Verb.PATCH, "DaemonSet", {"/status/numberReady": 1}),
        # setting-sync without the tests its decision rested on.
        cmd("setting-sync", Verb.PATCH_STATUS, "Setting", {"/status/applied": True}),
        cmd(
            "setting-sync",
            Verb.PATCH,
            "DaemonSet",
            {"/spec/template/spec/priorityClassName": "p"},
            name="longhorn-csi-plugin",
        ),
        cmd("setting-sync", Verb.DELETE, "Pod", preconditions={IM_LABEL: "instance-manager"}),
        cmd(
            "setting-sync",
            Verb.DELETE,
            "Pod",
            preconditions={
                "/metadata/uid": "u",
                "/metadata/resourceVersion": "7",
                IM_LABEL: "longhorn-manager",
            },
        ),
        cmd("setting-sync", Verb.PATCH_STATUS, "DaemonSet", {"/spec/template/spec/priorityClassName": "p"}),
        cmd("im-restart", Verb.DELETE, "Volume"),
        cmd("im-restart", Verb.PATCH, "Pod", {"/metadata/labels/x": "y"}),
        # Pod and replica deletes must say what they mean to delete.
        cmd("im-restart", Verb.DELETE, "Pod"),
        cmd("im-restart", Verb.DELETE, "Pod", preconditions={IM_LABEL: "longhorn-manager"}),
        cmd("v2-upgrade", Verb.DELETE, "Replica"),
        cmd("v2-upgrade", Verb.DELETE, "Replica", preconditions={"/spec/dataEngine": "v1"}),
        # engine-upgrade without the tests its decision rested on.
        cmd("engine-upgrade", Verb.PATCH, "Volume", {"/spec/image": DEFAULT_IMAGE["default-engine-image"]}),
        *(
            cmd(
                "engine-upgrade",
                Verb.PATCH,
                "Volume",
                {"/spec/image": DEFAULT_IMAGE["default-engine-image"]},
                preconditions={p: v for p, v in EU_TESTS.items() if p != left_out},
            )
            for left_out in ("/spec/image", "/status/currentImage")
        ),
        cmd("v2-upgrade", Verb.PATCH, "Volume", {"/spec/numberOfReplicas": 2}),
        cmd("v2-upgrade", Verb.DELETE, "Volume"),
        # v2-upgrade without the version its step read, or the node, or the old image.
        cmd("v2-upgrade", Verb.PATCH, "Volume", {"/spec/image": "i"}, preconditions=V2),
        cmd(
            "v2-upgrade",
            Verb.PATCH,
            "Replica",
            {"/spec/desireState": "stopped"},
            preconditions={**READ, **V2},
        ),
        cmd("v2-upgrade", Verb.DELETE, "Replica", preconditions=V2),
        cmd("v2-upgrade", Verb.DELETE, "InstanceManager", preconditions=V2_ON_NODE),
        cmd("v2-upgrade", Verb.PATCH_STATUS, "DataEngineUpgradeManager", {"/status/state": "upgrading"}),
        # Never a CR's spec (the user's), nor a status field the machines do not write.
        cmd("v2-upgrade", Verb.PATCH, "DataEngineUpgradeManager", {"/spec/nodes": []}, preconditions=READ),
        cmd("v2-upgrade", Verb.PATCH, "NodeDataEngineUpgrade", {"/spec/nodeID": "n"}, preconditions=READ),
        cmd(
            "v2-upgrade",
            Verb.PATCH_STATUS,
            "NodeDataEngineUpgrade",
            {"/status/ownerID": "n"},
            preconditions=READ,
        ),
        cmd("v2-upgrade", Verb.CREATE, "DataEngineUpgradeManager", body={"metadata": {"name": "obj"}}),
        cmd("v2-upgrade", Verb.DELETE, "Snapshot"),
        cmd("v2-upgrade", Verb.PATCH, "Engine", {"/spec/image": "x"}),
        cmd("nobody", Verb.CREATE, "Event", body={"metadata": {"name": "obj"}}),  # unknown service
        cmd("v2-upgrade", Verb.PATCH, "Secret", {"/data/x": "y"}),  # unknown kind
        cmd("v2-upgrade", Verb.PATCH, "Replica", {"spec/desireState": "stopped"}),  # not a pointer
        cmd("v2-upgrade", Verb.PATCH, "Replica", {}),  # nothing to change
    ],
    ids=lambda c: f"{c.service}-{c.verb}-{c.target.kind}-{[f.path for f in c.changes]}",
)
def test_everything_else_is_rejected(policy: Policy, command: Command) -> None:
    verdict = policy.check(command, DEFAULT_IMAGE)
    assert not verdict.allowed
    assert verdict.reason


@pytest.mark.parametrize(
    ("command", "guards"),
    [
        (
            cmd(
                "setting-sync",
                Verb.PATCH_STATUS,
                "Setting",
                {"/status/applied": True},
                preconditions={"/value": "key1:NoSchedule"},
            ),
            0,
        ),
        (
            cmd(
                "setting-sync",
                Verb.PATCH,
                "DaemonSet",
                {
                    "/spec/template/spec/tolerations": [{"key": "k", "operator": "Exists"}],
                    "/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations": "[]",
                    "/spec/template/spec/nodeSelector": {"a": "b"},
                    "/spec/template/spec/priorityClassName": "p",
                    "/spec/template/spec/containers/1/resources": {"limits": {"cpu": "1"}},
                    "/spec/template/metadata/annotations/k8s.v1.cni.cncf.io~1networks": "[]",
                },
                name="longhorn-csi-plugin",
                preconditions={"/metadata/resourceVersion": "7"},
            ),
            0,
        ),
        (
            cmd(
                "setting-sync",
                Verb.PATCH,
                "deployment",
                {"/spec/template/spec/priorityClassName": "p"},
                name="csi-provisioner",
                preconditions={"/metadata/resourceVersion": "7"},
            ),
            0,
        ),
        *(
            (
                cmd(
                    "setting-sync",
                    Verb.DELETE,
                    "Pod",
                    name=f"{component}-abc",
                    preconditions={
                        "/metadata/uid": "u",
                        "/metadata/resourceVersion": "7",
                        IM_LABEL: component,
                    },
                ),
                1,
            )
            for component in ("instance-manager", "share-manager", "backing-image-manager")
        ),
        (
            cmd(
                "im-restart",
                Verb.DELETE,
                "Pod",
                name="instance-manager-abc",
                preconditions={IM_LABEL: "instance-manager"},
            ),
            1,
        ),
        (
            cmd(
                "v2-upgrade",
                Verb.PATCH,
                "Volume",
                {"/spec/targetNodeIDForLiveUpgrade": "node-2"},
                preconditions={**READ, **V2},
            ),
            1,
        ),
        (
            cmd(
                "v2-upgrade",
                Verb.PATCH,
                "Volume",
                {"/spec/image": "any-v2-image"},
                preconditions={**READ, **V2},
            ),
            1,
        ),
        (
            cmd(
                "v2-upgrade",
                Verb.PATCH,
                "Replica",
                {"/spec/desireState": "stopped", "/spec/failedAt": ""},
                preconditions={**READ, **V2_ON_NODE},
            ),
            1,
        ),
        (
            cmd(
                "v2-upgrade",
                Verb.PATCH,
                "Replica",
                {"/spec/lastFailedAt": "2026-01-01T00:00:00Z"},
                preconditions={**READ, **V2_ON_NODE},
            ),
            1,
        ),
        (cmd("v2-upgrade", Verb.DELETE, "Replica", preconditions=V2_ON_NODE), 1),
        (
            cmd(
                "v2-upgrade",
                Verb.DELETE,
                "InstanceManager",
                preconditions={**V2_ON_NODE, "/spec/image": "old"},
            ),
            1,
        ),
        (
            cmd(
                "v2-upgrade",
                Verb.PATCH_STATUS,
                "NodeDataEngineUpgrade",
                {"/status/state": "switching-over", "/status/volumes": {}},
                preconditions=READ,
            ),
            0,
        ),
        (
            cmd(
                "v2-upgrade",
                Verb.PATCH_STATUS,
                "DataEngineUpgradeManager",
                {"/status/state": "upgrading", "/status/upgradingNode": "node-1"},
                preconditions=READ,
            ),
            0,
        ),
        (cmd("v2-upgrade", Verb.CREATE, "Snapshot", body={"metadata": {"name": "obj"}}), 0),
        (
            cmd(
                "v2-upgrade",
                Verb.CREATE,
                "NodeDataEngineUpgrade",
                body={"spec": {"nodeID": "n"}, "metadata": {"name": "obj"}},
            ),
            0,
        ),
        (
            cmd(
                "upgrade-gate",
                Verb.CREATE,
                "Event",
                body={
                    "metadata": {"name": "obj"},
                    "involvedObject": {"kind": "Setting", "name": "current-longhorn-version"},
                    "source": {"component": "corral-watcher"},
                    "reason": "FailedUpgradePreCheck",
                    "type": "Warning",
                },
            ),
            0,
        ),
        (
            cmd(
                "im-restart",
                Verb.CREATE,
                "Event",
                body={
                    "apiVersion": "v1",
                    "metadata": {"name": "obj"},
                    "involvedObject": {"kind": "Pod", "name": "instance-manager-1"},
                    "source": {"component": "corral-im-restart"},
                    "reportingComponent": "corral-im-restart",
                },
            ),
            0,
        ),
    ],
    ids=lambda x: x.service if isinstance(x, Command) else str(x),
)
def test_allowed(policy: Policy, command: Command, guards: int) -> None:
    verdict = policy.check(command, DEFAULT_IMAGE)
    assert verdict.allowed, verdict.reason
    assert len(verdict.guards) == guards


def test_guards_carry_the_required_fields(policy: Policy) -> None:
    verdict = policy.check(
        cmd("im-restart", Verb.DELETE, "Pod", preconditions={IM_LABEL: "instance-manager"})
    )
    assert [(g.path, g.value) for g in verdict.guards] == [
        ("/metadata/labels/longhorn.io~1component", "instance-manager")
    ]
    verdict = policy.check(
        cmd("v2-upgrade", Verb.PATCH, "Volume", {"/spec/image": "i"}, preconditions={**READ, **V2})
    )
    assert [(g.path, g.value) for g in verdict.guards] == [("/spec/dataEngine", "v2")]


@pytest.mark.parametrize(
    "body",
    [
        None,
        {"metadata": {"name": "other"}},
        {"metadata": {"generateName": "obj-"}},
        {"metadata": {"name": "obj", "namespace": "default"}},
        {"kind": "Pod", "metadata": {"name": "obj"}},
        {"apiVersion": "events.k8s.io/v1", "metadata": {"name": "obj"}},
    ],
)
def test_creates_must_name_their_target(policy: Policy, body: dict[str, Any] | None) -> None:
    assert not policy.check(cmd("v2-upgrade", Verb.CREATE, "Event", body=body)).allowed


def test_preconditions_may_read_any_field_but_must_be_pointers(policy: Policy) -> None:
    ok = cmd(
        "v2-upgrade", Verb.DELETE, "Replica", preconditions={**V2_ON_NODE, "/status/currentState": "running"}
    )
    assert policy.check(ok).allowed
    bad = cmd("v2-upgrade", Verb.DELETE, "Replica", preconditions={**V2_ON_NODE, "status": "x"})
    assert not policy.check(bad).allowed


def test_a_policy_naming_a_status_field_without_patch_status_is_refused() -> None:
    text = """
schema: corral.actuator-policy/v2
namespaces: [ns]
services:
  s:
    rules:
      - kind: volume
        verbs: [patch]
        fields: [{path: /status/state}]
"""
    with pytest.raises(PolicyError, match="patch-status"):
        Policy.from_yaml(text)


HEAD = "schema: corral.actuator-policy/v2\nnamespaces: [ns]\n"


@pytest.mark.parametrize(
    "text",
    [
        "schema: corral.actuator-policy/v1\nnamespaces: [ns]\n",
        "schema: corral.actuator-policy/v2\nnamespaces: []\n",
        HEAD + "services: {s: {rules: [{kind: secret, verbs: [delete]}]}}\n",
        HEAD + "services: {s: {rules: [{kind: volume, verbs: [patch]}]}}\n",
        HEAD + "services: {s: {rules: [{kind: volume, verbs: [eat]}]}}\n",
        HEAD + "services: {s: [{kind: volume, verbs: [delete]}]}\n",  # the v1 layout
        HEAD + "unknown: 1\n",
        HEAD + "services: {s: {rules: [{kind: Volume, verbs: [delete]}]}}\n",
        HEAD + "services: {s: {rules: [{kind: pod, verbs: [delete], preconditions: [{path: x}]}]}}\n",
        HEAD
        + "services: {s: {rules: [{kind: pod, verbs: [delete], preconditions: ["
        + "{path: /a, value: 1, ifOmitted: 2}]}]}}\n",
        # Workloads must be named, never corral's own, and creates cannot be limited by name.
        HEAD
        + "services: {s: {rules: [{kind: deployment, verbs: [patch], fields: [{path: /spec/replicas}]}]}}\n",
        HEAD
        + "services: {s: {rules: [{kind: deployment, verbs: [patch], names: [corral-actuator],"
        + " fields: [{path: /spec/replicas}]}]}}\n",
        HEAD + "services: {s: {rules: [{kind: pod, verbs: [create], names: [p]}]}}\n",
        HEAD + "services: {s: {fenced: maybe}}\n",
        HEAD + "reads: [{kind: secret, verbs: [get]}]\n",
        HEAD + "reads: [{kind: setting, verbs: [delete]}]\n",
        # A value taken from a precondition the rule does not require (it could be left out).
        HEAD
        + "services: {s: {rules: [{kind: volume, verbs: [patch], fields: [{path: /spec/image,"
        + " valueFromPrecondition: /status/currentImage}]}]}}\n",
    ],
)
def test_bad_policy_files_are_refused(text: str) -> None:
    with pytest.raises(PolicyError):
        Policy.from_yaml(text)


@pytest.mark.parametrize(
    ("left_out", "reason"),
    [
        ("/spec/image", "must carry a precondition on /spec/image"),
        ("/status/currentImage", "must carry a precondition on /status/currentImage"),
    ],
)
def test_engine_upgrade_without_its_preconditions_is_refused(
    policy: Policy, left_out: str, reason: str
) -> None:
    c = cmd(
        "engine-upgrade",
        Verb.PATCH,
        "Volume",
        {"/spec/image": DEFAULT_IMAGE["default-engine-image"]},
        preconditions={p: v for p, v in EU_TESTS.items() if p != left_out},
    )
    verdict = policy.check(c, DEFAULT_IMAGE)
    assert not verdict.allowed
    assert reason in verdict.reason and "engine-upgrade" in verdict.reason


def test_engine_upgrade_without_an_owner_test_only_for_a_volume_without_owner(policy: Policy) -> None:
    """engine-upgrade tests /status/ownerID only when the volume has an owner node (core.preconditions):
    such a command is allowed, guarded by the owner being empty, so it cannot move an owned volume."""
    tests = {p: v for p, v in EU_TESTS.items() if p != "/status/ownerID"}
    c = cmd(
        "engine-upgrade",
        Verb.PATCH,
        "Volume",
        {"/spec/image": DEFAULT_IMAGE["default-engine-image"]},
        preconditions=tests,
    )
    verdict = policy.check(c, DEFAULT_IMAGE)
    assert verdict.allowed, verdict.reason
    assert [(g.path, g.value) for g in verdict.guards] == [("/status/ownerID", "")]


def test_required_precondition_values_are_compared_as_json(policy: Policy) -> None:
    c = cmd("v2-upgrade", Verb.DELETE, "Replica", preconditions={"/spec/dataEngine": "v1"})
    verdict = policy.check(c)
    assert not verdict.allowed
    assert "must carry the precondition /spec/dataEngine == 'v2', not 'v1'" in verdict.reason
    # The same path spelled with escapes still counts as the same precondition.
    label = cmd(
        "im-restart",
        Verb.DELETE,
        "Pod",
        preconditions={"/metadata/labels/longhorn.io~1component": "instance-manager"},
    )
    assert policy.check(label).allowed


def test_only_the_named_workloads(policy: Policy) -> None:
    c = cmd(
        "setting-sync",
        Verb.PATCH,
        "Deployment",
        {"/spec/template/spec/priorityClassName": "p"},
        name="corral-actuator",
    )
    verdict = policy.check(c)
    assert not verdict.allowed
    assert "'corral-actuator' is not one setting-sync may patch" in verdict.reason


def test_every_decision_service_is_fenced_and_the_gate_events_are_not(policy: Policy) -> None:
    deciders = {"engine-upgrade", "setting-sync", "im-restart", "v2-upgrade"}
    assert policy.services >= deciders | {"upgrade-gate"}
    assert {s for s in policy.services if policy.fenced(s)} == deciders
    fenced = Policy.from_yaml(HEAD + "services: {s: {fenced: true}, t: {}}\n")
    assert fenced.fenced("s") and not fenced.fenced("t") and not fenced.fenced("unknown")


def _event(service: str, kind: str, component: str, name: str = "x") -> Command:
    return cmd(
        service,
        Verb.CREATE,
        "Event",
        body={
            "metadata": {"name": "obj"},
            "involvedObject": {"kind": kind, "name": name},
            "source": {"component": component},
            "reportingComponent": component,
        },
    )


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        # The watcher may publish gate Events (every component's gate does): only about the version
        # Setting, in a corral component's name.
        (_event("upgrade-gate", "Volume", "corral-watcher", "pvc-a"), "about the current-longhorn-version"),
        (_event("upgrade-gate", "Setting", "longhorn-manager", "current-longhorn-version"), "names a corral"),
        # A decision service's Events: in its own name, about the kinds it works on.
        (_event("engine-upgrade", "Volume", "corral-setting-sync"), "names engine-upgrade as its source"),
        (_event("engine-upgrade", "Volume", ""), "names engine-upgrade as its source"),
        (_event("engine-upgrade", "Pod", "corral-engine-upgrade"), "about the kinds it works on"),
        (_event("im-restart", "Volume", "corral-im-restart"), "about the kinds it works on"),
        (_event("setting-sync", "Node", "setting-sync"), "about the kinds it works on"),
    ],
    ids=lambda x: x.service if isinstance(x, Command) else str(x)[:20],
)
def test_an_event_outside_its_senders_name_and_kinds_is_refused(
    policy: Policy, command: Command, reason: str
) -> None:
    verdict = policy.check(command, DEFAULT_IMAGE)
    assert not verdict.allowed and reason in verdict.reason, verdict.reason


@pytest.mark.parametrize(
    "command",
    [
        _event("engine-upgrade", "Volume", "corral-engine-upgrade"),
        _event("engine-upgrade", "Setting", "corral-engine-upgrade"),  # its coexistence stance
        _event("setting-sync", "Setting", "setting-sync"),
        _event("setting-sync", "DaemonSet", "corral-setting-sync"),
        _event("im-restart", "InstanceManager", "corral-im-restart"),
        _event("upgrade-gate", "Setting", "corral-actuator", "current-longhorn-version"),
    ],
    ids=lambda c: f"{c.service}",
)
def test_an_event_in_its_senders_name_about_its_kinds_is_allowed(policy: Policy, command: Command) -> None:
    verdict = policy.check(command, DEFAULT_IMAGE)
    assert verdict.allowed, verdict.reason


PAUSED = "/metadata/annotations/engine-upgrade.corral.io~1wave-paused"


def test_engine_upgrade_may_mark_an_engine_image_paused_and_nothing_more(policy: Policy) -> None:
    """The wave guard's pause (corral_engine_upgrade.wave_guard): the one annotation, tested on the
    EngineImage's image; never the operator's resume, its spec, or without the image test."""
    image = {"/spec/image": DEFAULT_IMAGE["default-engine-image"]}
    mark = cmd("engine-upgrade", Verb.PATCH, "EngineImage", {PAUSED: "1: why"}, preconditions=image)
    verdict = policy.check(mark, DEFAULT_IMAGE)
    assert verdict.allowed, verdict.reason
    resumed = "/metadata/annotations/engine-upgrade.corral.io~1wave-resumed"
    for refused in (
        cmd("engine-upgrade", Verb.PATCH, "EngineImage", {resumed: "1"}, preconditions=image),
        cmd("engine-upgrade", Verb.PATCH, "EngineImage", {"/spec/image": "evil/engine"}, preconditions=image),
        cmd("engine-upgrade", Verb.PATCH, "EngineImage", {PAUSED: "1: why"}),
        cmd("engine-upgrade", Verb.DELETE, "EngineImage", preconditions=image),
        cmd("setting-sync", Verb.PATCH, "EngineImage", {PAUSED: "1: why"}, preconditions=image),
    ):
        assert not policy.check(refused, DEFAULT_IMAGE).allowed, refused


ROLLED_BACK = "/metadata/annotations/engine-upgrade.corral.io~1rolled-back"
NEW_IMAGE = DEFAULT_IMAGE["default-engine-image"]
# What a stuck volume's rollback tests (corral_engine_upgrade.rollback): upgrading OLD -> NEW.
STUCK = {**EU_TESTS, "/spec/image": NEW_IMAGE, "/metadata/uid": "uid-1"}


def test_engine_upgrade_may_roll_a_volume_back_only_to_the_image_its_command_tests_it_runs(
    policy: Policy,
) -> None:
    """A stuck upgrade's way out: spec.image back to the tested status.currentImage, and the image it
    leaves recorded; never any other image, without the tests, or another annotation."""
    rollback = {"/spec/image": OLD_IMAGE, ROLLED_BACK: NEW_IMAGE}
    verdict = policy.check(cmd("engine-upgrade", Verb.PATCH, "Volume", rollback, preconditions=STUCK))
    assert verdict.allowed, verdict.reason
    without_uid = {p: v for p, v in STUCK.items() if p != "/metadata/uid"}
    for changes, tests in (
        ({"/spec/image": "evil/engine:1"}, STUCK),  # an image it does not test the volume runs
        ({"/spec/image": "evil/engine:1"}, {**STUCK, "/status/currentImage": "evil/engine:2"}),
        ({**rollback, ROLLED_BACK: "something else"}, STUCK),
        (rollback, {p: v for p, v in STUCK.items() if p != "/status/currentImage"}),
        (rollback, without_uid),
        ({**rollback, "/metadata/annotations/other": "x"}, STUCK),
    ):
        forged = cmd("engine-upgrade", Verb.PATCH, "Volume", changes, preconditions=tests)
        assert not policy.check(forged, DEFAULT_IMAGE).allowed, (changes, tests)


def test_engine_upgrade_may_end_a_rollbacks_hold_only_by_removing_its_mark(policy: Policy) -> None:
    """The upgrade of a volume once rolled back removes its `rolled-back` annotation, nothing else."""
    upgrade = {"/spec/image": NEW_IMAGE}
    ends = cmd("engine-upgrade", Verb.PATCH, "Volume", {**upgrade, ROLLED_BACK: None}, preconditions=EU_TESTS)
    assert policy.check(ends, DEFAULT_IMAGE).allowed
    sets = cmd("engine-upgrade", Verb.PATCH, "Volume", {**upgrade, ROLLED_BACK: "x"}, preconditions=EU_TESTS)
    verdict = policy.check(sets, DEFAULT_IMAGE)
    assert not verdict.allowed and "may only be removed" in verdict.reason
