"""Driving a real actuator over a real NATS server: publish commands, read streams, run the service.

The actuator runs either in this process (`InProcessActuator`, via the runtime harness `serve`) or
as its own process (`tests.fixtures.processes.ServiceProcess`, `python -m corral_actuator`), which a
test can SIGKILL to show that a crash mid-burst loses nothing and doubles nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypeVar

import msgspec
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import BucketNotFoundError, KeyNotFoundError

from corral_actuator.config import ActuatorConfig
from corral_actuator.kinds import resolve_kind
from corral_actuator.runner import main as actuator_main
from corral_bus import MSG_ID_HEADER, Bus
from corral_bus.lease import LEASE_BUCKET, LeaseRecord
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, DeadLetter
from corral_model.subjects import DEAD_STREAM, RESULTS_STREAM, command_subject
from corral_runtime.service import ServiceContext, serve
from tests.fixtures.processes import eventually
from tests.integration.actuator.conftest import POLICY_FILE

T = TypeVar("T")


async def publish_command(bus: Bus, command: Command, *, msg_id: str | None = None) -> bool:
    """Publish as a decision service would: the command id as Nats-Msg-Id (or the one given).

    Returns False when JetStream dropped it as a duplicate within its dedup window."""
    info = resolve_kind(command.target.kind)
    token = info.token if info is not None else command.target.kind.lower()
    subject = command_subject(command.service, token, command.target.namespace, command.target.name)
    ack = await bus.js.publish(subject, codec.encode(command), headers={MSG_ID_HEADER: msg_id or command.id})
    return not ack.duplicate


async def stream_count(bus: Bus, stream: str) -> int:
    info = await bus.js.stream_info(stream)
    return int(info.state.messages)


async def read_stream(bus: Bus, stream: str) -> list[tuple[str, bytes]]:
    """Every message in `stream` (subject, payload), through an ephemeral consumer."""
    total = await stream_count(bus, stream)
    out: list[tuple[str, bytes]] = []
    if total == 0:
        return out
    psub = await bus.js.pull_subscribe(
        "", stream=stream, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=5.0)
    )
    try:
        while len(out) < total:
            for msg in await psub.fetch(min(500, total - len(out)), timeout=5):
                out.append((msg.subject, msg.data))
                await msg.ack()
    finally:
        with contextlib.suppress(Exception):
            await psub.unsubscribe()
    return out


async def results(bus: Bus) -> list[CommandResult]:
    return [codec.decode(data, CommandResult) for _, data in await read_stream(bus, RESULTS_STREAM)]


async def dead_letters(bus: Bus) -> list[DeadLetter]:
    return [codec.decode(data, DeadLetter) for _, data in await read_stream(bus, DEAD_STREAM)]


async def lease_holder(bus: Bus, service: str = "actuator") -> str | None:
    """The instance holding the service's leader lease (NATS KV `corral-leases`), None when free."""
    try:
        kv = await bus.js.key_value(LEASE_BUCKET)
        entry = await kv.get(service)
    except (BucketNotFoundError, KeyNotFoundError):
        return None
    if not entry.value:
        return None
    return msgspec.json.decode(entry.value, type=LeaseRecord).holder


def actuator_env(nats_url: str, kubeconfig: str, **overrides: Any) -> dict[str, str]:
    env = {
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_KUBECONFIG": kubeconfig,
        "CORRAL_POLICY_PATH": str(POLICY_FILE),
        "CORRAL_HEALTH_PORT": "0",
        "CORRAL_HEALTH_HOST": "127.0.0.1",
        "CORRAL_LOG_LEVEL": "warning",
        "CORRAL_QPS": "0",
        "CORRAL_ACK_WAIT_S": "2",
        "CORRAL_LEASE_TTL_S": "2",
        "CORRAL_SHUTDOWN_GRACE_S": "5",
        "CORRAL_AUDIT_LOG": "false",
        # A burst is made when published and may take longer than the age limit on a loaded host;
        # the tests of expiry turn it on.
        "CORRAL_MAX_COMMAND_AGE_S": "0",
    }
    env.update({f"CORRAL_{k.upper()}": str(v) for k, v in overrides.items()})
    return env


def actuator_config(nats_url: str, kubeconfig: str, instance: str, **overrides: Any) -> ActuatorConfig:
    fields: dict[str, Any] = {
        "service": "actuator",
        "instance": instance,
        "nats_url": nats_url,
        "kubeconfig": kubeconfig,
        "policy_path": str(POLICY_FILE),
        "health_port": 0,
        "health_host": "127.0.0.1",
        "log_level": "warning",
        "qps": 0.0,
        "ack_wait_s": 2.0,
        "lease_ttl_s": 2.0,
        "shutdown_grace_s": 5.0,
        "audit_log": False,
        "max_command_age_s": 0.0,  # as in actuator_env
    }
    fields.update(overrides)
    return msgspec.convert(fields, ActuatorConfig)


class InProcessActuator:
    """The actuator service in this event loop; `ctx` is its ServiceContext once started."""

    def __init__(self, config: ActuatorConfig) -> None:
        self.config = config
        self.ctx: ServiceContext[ActuatorConfig] | None = None
        self.task: asyncio.Task[int] | None = None

    async def _main(self, ctx: ServiceContext[ActuatorConfig]) -> None:
        self.ctx = ctx
        await actuator_main(ctx)

    async def start(self) -> None:
        self.task = asyncio.create_task(
            serve(self.config, self._main, leader_election=True, ready_when=["policy"])
        )

        async def ready() -> bool:
            assert self.task is not None
            if self.task.done():
                raise AssertionError(f"actuator exited early: {self.task.result()}")
            return self.ctx is not None and self.ctx.readiness.ready

        await eventually(ready, within=20, what="the actuator to be ready")

    @property
    def is_leader(self) -> bool:
        return self.ctx is not None and self.ctx.is_leader

    async def stop(self) -> int:
        """The graceful way out, as on SIGTERM: stop taking work, drain, release the lease."""
        assert self.task is not None and self.ctx is not None
        self.ctx.stop.set()
        return await asyncio.wait_for(self.task, 30)
