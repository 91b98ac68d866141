"""Shared set-up of the actuator's integration tests: a policy, an Actuator on the emulator, seed objects."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from corral_actuator.actuator import Actuator
from corral_actuator.api import KubeApi, RetryPolicy
from corral_actuator.limiter import Unlimited
from corral_actuator.policy import Policy
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command
from corral_sandbox.emulator import Emulator

POLICY_FILE = Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml"
NS = "longhorn-system"
DEFAULT_IMAGE = "longhornio/longhorn-engine:v1.10.0"
OLD_IMAGE = "longhornio/longhorn-engine:v1.9.1"
OWNER = "node-1"
LIMIT = 10_000
"""concurrent-automatic-engine-upgrade-per-node-limit: automatic upgrade on (Longhorn's default, 0,
is off), and high: these tests put every volume on one owner node to measure the write path, and
the per-node limit has tests of its own (test_invariants.py)."""
FAST_RETRY = RetryPolicy(attempts=4, timeout=10.0, wait_initial=0.01, wait_max=0.05, wait_jitter=0.01)


def upgrade(
    name: str,
    *,
    to: str = DEFAULT_IMAGE,
    expect: Any = OLD_IMAGE,
    created_at: float | None = None,
    term: int = 1,
) -> Command:
    """An engine-upgrade command as its leader makes one: the preconditions the policy requires
    (the images and the owner node; core.preconditions), and its lease term (engine-upgrade is
    fenced)."""
    return new_command(
        term=term,
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace=NS, name=name),
        changes=(FieldValue(path="/spec/image", value=to),),
        preconditions=(
            FieldValue(path="/spec/image", value=expect),
            FieldValue(path="/status/currentImage", value=expect),
            FieldValue(path="/status/ownerID", value=OWNER),
        ),
        created_at=time.time() if created_at is None else created_at,
    )


def volume(name: str, image: str = OLD_IMAGE, data_engine: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Volume",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": image, "dataEngine": data_engine, "numberOfReplicas": 3},
        "status": {"state": "detached", "currentImage": image, "ownerID": OWNER},
    }


def setting(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": NS},
        "value": value,
        "status": {"applied": False},
    }


def seed_cluster(emulator: Emulator, volumes: int = 3) -> None:
    emulator.load(
        "longhorn.io",
        "settings",
        [
            setting("default-engine-image", DEFAULT_IMAGE),
            setting("concurrent-automatic-engine-upgrade-per-node-limit", str(LIMIT)),
        ],
    )
    emulator.load("longhorn.io", "volumes", [volume(f"vol-{i}") for i in range(volumes)])
    emulator.write_log.clear()


class SecurityEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, command: Command, reason: str) -> None:
        self.events.append((command.id, reason))


MakeActuator = Callable[..., Actuator]


@pytest.fixture
def security_events() -> SecurityEvents:
    return SecurityEvents()


@pytest.fixture
async def make_actuator(
    kube_api: client.ApiClient, security_events: SecurityEvents
) -> AsyncIterator[MakeActuator]:
    policy = Policy.load(POLICY_FILE)

    made: list[KubeApi] = []
    actuators: list[Actuator] = []

    def make(
        *,
        dry_run: bool = False,
        request_timeout: float = 5.0,
        retry: RetryPolicy = FAST_RETRY,
        **options: Any,
    ) -> Actuator:
        """`options` go to Actuator (clock, max_command_age, …)."""
        api = KubeApi(kube_api, Unlimited(), request_timeout=request_timeout, retry=retry, dry_run=dry_run)
        made.append(api)
        actuators.append(Actuator(api, policy, security_log=security_events, **options))
        return actuators[-1]

    yield make
    for actuator in actuators:
        await actuator.close()
    for api in made:
        await api.close()
