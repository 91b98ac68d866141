"""Issue 7's sandbox proof: a service started against a cluster at an unsupported version exits
non-zero, the Warning Event `FailedUpgradePreCheck` is recorded, and nothing else in the cluster moves.

Everything is real and separate, as deployed: the API emulator (this process, over HTTP), a NATS
server, the watcher and the actuator as child processes, and the gated service as a third child
process under the service harness. The only write the emulator sees is the actuator creating the
Event. The allowed counterpart (exit 0, Normal `PassedUpgradeCheck`) runs the same way.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from corral_sandbox.emulator import Emulator
from tests.fixtures.processes import ServiceProcess, eventually, python_module

NS = "longhorn-system"
GROUP = "longhorn.io"
ROOT = Path(__file__).parents[3]
POLICY = ROOT / "deploy" / "policy" / "actuator-policy.yaml"
GATED_SERVICE = Path(__file__).with_name("gated_service.py")
WATCHED = ("settings", "engineimages", "volumes")


def lh(kind: str, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        **fields,
    }


def seed(emulator: Emulator, version: str) -> None:
    emulator.load(
        GROUP,
        "settings",
        [
            lh("Setting", "current-longhorn-version", value=version),
            lh("Setting", "default-engine-image", value="longhornio/longhorn-engine:v1.11.0"),
            lh("Setting", "concurrent-automatic-engine-upgrade-per-node-limit", value="3"),
        ],
    )
    emulator.load(
        GROUP,
        "engineimages",
        [
            lh(
                "EngineImage",
                "ei-3b9e5c1a",
                spec={"image": "longhornio/longhorn-engine:v1.9.3"},
                status={"refCount": 4, "state": "deployed", "cliAPIVersion": 10, "controllerAPIVersion": 5},
            )
        ],
    )
    emulator.load(
        GROUP,
        "volumes",
        [lh("Volume", f"vol-{i}", spec={"image": "longhornio/longhorn-engine:v1.9.3"}) for i in range(3)],
    )


def cluster_objects(emulator: Emulator) -> dict[str, dict[str, str]]:
    """Every non-Event object with its resourceVersion."""
    return {
        plural: {
            o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in emulator.list(GROUP, plural, NS)
        }
        for plural in WATCHED
    }


@pytest.fixture
async def children(tmp_path: Path) -> AsyncIterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    yield started
    for child in reversed(started):
        await child.stop()


def common_env(nats_url: str, emulator: Emulator, service: str) -> dict[str, str]:
    return {
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_NAMESPACE": NS,
        "CORRAL_HEALTH_PORT": "0",
        "CORRAL_HEALTH_HOST": "127.0.0.1",
        "CORRAL_LOG_LEVEL": "warning",
        "CORRAL_INSTANCE": f"{service}-0",
        "CORRAL_LEASE_TTL_S": "2",
        "CORRAL_SHUTDOWN_GRACE_S": "5",
        "LONGHORN_DISTRO": "",
        "CORRAL_UPGRADE_VERSION_CHECK": "true",
        "KUBECONFIG": str(emulator.kubeconfig_path),
    }


# The watcher and actuator here play the *running* version that keeps serving while the new build's
# pods start (as Longhorn's old manager does while the new one crash-loops): at v1.9.3 this build's
# own watcher and actuator would refuse to start too, and then nothing could record the Event.
OLD_VERSION_STILL_SERVING = {"CORRAL_UPGRADE_GATE": "false"}

BLOCKED_REASON = "failed to upgrade since upgrading from v1.9.3 to v1.11.0 for minor version is not supported"


@pytest.mark.parametrize(
    ("version", "exit_code", "summary", "event_type", "event_reason", "event_message"),
    [
        pytest.param(
            "v1.9.3", 1, f"blocked: {BLOCKED_REASON}", "Warning", "FailedUpgradePreCheck", BLOCKED_REASON,
            id="blocked",
        ),
        pytest.param(
            "v1.9.3", 1, f"blocked: {BLOCKED_REASON}", "Warning", "FailedUpgradePreCheck", BLOCKED_REASON,
            id="blocked-live", marks=pytest.mark.live_gate,
        ),
        pytest.param(
            "v1.10.2", 0, "allowed: minor upgrade from v1.10.2 to v1.11.0 is supported", "Normal",
            "PassedUpgradeCheck", "pre-upgrade check passed", id="allowed",
        ),
    ],
)  # fmt: skip
async def test_gated_service_start(
    emulator: Emulator,
    nats_server: Any,
    bus: Any,
    children: list[ServiceProcess],
    tmp_path: Path,
    version: str,
    exit_code: int,
    summary: str,
    event_type: str,
    event_reason: str,
    event_message: str,
    request: pytest.FixtureRequest,
) -> None:
    # The live variant is the watcher's and actuator's gate: it reads the API server, not the bus.
    gate = "live" if request.node.get_closest_marker("live_gate") else "bus"
    seed(emulator, version)
    before = cluster_objects(emulator)
    writes_before = emulator.write_log.total

    watcher = ServiceProcess(
        "watcher",
        python_module("corral_watcher"),
        {
            **common_env(nats_server.url, emulator, "watcher"),
            "CORRAL_KUBECONFIG": str(emulator.kubeconfig_path),
            "CORRAL_KINDS": "setting,engineimage,volume",
            **OLD_VERSION_STILL_SERVING,
        },
        tmp_path,
    )
    actuator = ServiceProcess(
        "actuator",
        python_module("corral_actuator"),
        {
            **common_env(nats_server.url, emulator, "actuator"),
            "CORRAL_KUBECONFIG": str(emulator.kubeconfig_path),
            "CORRAL_POLICY_PATH": str(POLICY),
            "CORRAL_QPS": "0",
            "CORRAL_ACK_WAIT_S": "2",
            "CORRAL_AUDIT_LOG": "false",
            **OLD_VERSION_STILL_SERVING,
        },
        tmp_path,
    )
    service = ServiceProcess(
        "engine-upgrade",
        [sys.executable, str(GATED_SERVICE)],
        {
            **common_env(nats_server.url, emulator, "engine-upgrade"),
            "GATED_SERVICE_NAME": "engine-upgrade",
            "GATED_SERVICE_GATE": gate,
            "CORRAL_KUBECONFIG": str(emulator.kubeconfig_path),
        },
        tmp_path,
    )
    for child in (watcher, actuator, service):
        children.append(child)
        await child.start()

    # Blocked: the service exits non-zero (the pod would crash-loop) ...
    assert await service.wait(within=120) == exit_code, service.output()
    # ... with the reason in its log (an allowed start logs at info, below this test's log level),
    # and without its main ever acting when blocked ...
    if exit_code:
        assert summary in service.output()
    assert ("gated service acting" in service.output()) == (exit_code == 0)

    # ... the actuator records the Event on the version setting ...
    async def gate_event() -> dict[str, Any] | None:
        events = [e for e in emulator.list("", "events", NS) if e.get("reason") == event_reason]
        return events[0] if events else None

    event = await eventually(gate_event, within=60, what=f"the {event_reason} Event")
    assert event["type"] == event_type
    assert event["message"] == event_message
    assert event["involvedObject"]["kind"] == "Setting"
    assert event["involvedObject"]["name"] == "current-longhorn-version"
    setting = emulator.get(GROUP, "settings", NS, "current-longhorn-version")
    assert setting is not None
    assert event["involvedObject"]["uid"] == setting["metadata"]["uid"]
    assert event["source"] == {"component": "corral-engine-upgrade"}

    # ... and nothing else moved: same objects, same resourceVersions, and the Event the only write.
    assert cluster_objects(emulator) == before
    writes = emulator.write_log.records()[writes_before:]
    assert [(w.verb, w.plural, w.name) for w in writes if w.changed] == [
        ("create", "events", event["metadata"]["name"])
    ]


async def test_blocked_actuator_records_its_own_event(
    emulator: Emulator, nats_server: Any, bus: Any, children: list[ServiceProcess], tmp_path: Path
) -> None:
    """The actuator is the one writer: when its own gate blocks, no other actuator may be running to
    take its Event command, so it writes the FailedUpgradePreCheck Event itself, then exits 1."""
    seed(emulator, "v1.9.3")
    before = cluster_objects(emulator)
    writes_before = emulator.write_log.total
    actuator = ServiceProcess(
        "actuator",
        python_module("corral_actuator"),
        {
            **common_env(nats_server.url, emulator, "actuator"),
            "CORRAL_KUBECONFIG": str(emulator.kubeconfig_path),
            "CORRAL_POLICY_PATH": str(POLICY),
            "CORRAL_AUDIT_LOG": "false",
        },
        tmp_path,
    )
    children.append(actuator)
    await actuator.start()
    assert await actuator.wait(within=120) == 1, actuator.output()
    assert f"blocked: {BLOCKED_REASON}" in actuator.output()

    events = [e for e in emulator.list("", "events", NS) if e.get("reason") == "FailedUpgradePreCheck"]
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    assert events[0]["message"] == BLOCKED_REASON
    assert events[0]["source"] == {"component": "corral-actuator"}
    assert cluster_objects(emulator) == before
    writes = emulator.write_log.records()[writes_before:]
    assert [(w.verb, w.plural) for w in writes if w.changed] == [("create", "events")]
