"""The actuator decides on facts, not on what it remembers (issue 29's probe).

Each case once answered wrongly from memory: a refusal kept for minutes after the default engine
image had moved (the record treated a refusal as final, and a 2 s settings cache held the old
image), `applied` told to the same decision after the volume was rolled back (nothing written),
and a huge leader term learnt from a command that was never applied, locking the real leader out.
Each runs the actuator service in-process on real NATS against the sandbox's API emulator.
"""

from __future__ import annotations

import pytest

from corral_bus import Bus, Lease
from corral_model.envelopes import Outcome
from corral_sandbox.emulator import Emulator
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.integration.actuator.conftest import DEFAULT_IMAGE, NS, OLD_IMAGE, setting, volume
from tests.integration.actuator.harness import InProcessActuator, actuator_config, publish_command, results
from tests.integration.actuator.test_forged import (
    _kubeconfig,
    answered,
    engine_upgrade,
    owner_tests,
    seed_probe_targets,
    writes_to,
)

pytestmark = pytest.mark.integration

NEWER_IMAGE = "longhornio/longhorn-engine:v1.10.1"


def _default_image(emulator: Emulator, image: str) -> None:
    emulator.load("longhorn.io", "settings", [setting("default-engine-image", image)])


def _image(emulator: Emulator, name: str) -> object:
    found = emulator.get("longhorn.io", "volumes", NS, name)
    assert found is not None
    return found["spec"]["image"]


async def _outcome(bus: Bus, command_id: str, outcome: Outcome) -> None:
    async def there() -> bool:
        return any(r.command_id == command_id and r.outcome is outcome for r in await results(bus))

    await eventually(there, what=f"{command_id} to be {outcome}")


async def test_a_refusal_is_judged_again_and_settings_are_never_older_than_the_command(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_probe_targets(emulator)
    _default_image(emulator, OLD_IMAGE)  # the default has not moved yet
    # A settings cache far longer than the test: only the command's own date can refresh it.
    config = actuator_config(nats_server.url, _kubeconfig(emulator), "a-1", settings_ttl_s=600.0)
    actuator = InProcessActuator(config)
    await actuator.start()
    try:
        early = engine_upgrade("node1-vol-0", owner_tests("node-1"))
        await publish_command(bus, early)
        refused = (await answered(bus, [early]))[early.id]
        assert refused.outcome is Outcome.REJECTED_BY_POLICY
        assert "default-engine-image" in refused.detail

        _default_image(emulator, DEFAULT_IMAGE)  # the default moves; the cache still holds the old
        # A new decision made after the move is judged on the new value, not the cached one.
        later = engine_upgrade("node1-vol-1", owner_tests("node-1"))
        await publish_command(bus, later)
        assert (await answered(bus, [later]))[later.id].outcome is Outcome.APPLIED

        # The first decision again (its retry, past the dedup window): judged afresh, applied.
        again = engine_upgrade("node1-vol-0", owner_tests("node-1"))
        assert again.id == early.id
        await publish_command(bus, again, msg_id="retry-after-backoff")
        await _outcome(bus, again.id, Outcome.APPLIED)
        assert _image(emulator, "node1-vol-0") == DEFAULT_IMAGE
    finally:
        assert await actuator.stop() == 0


async def test_a_volume_rolled_back_is_upgraded_again_not_told_applied(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_probe_targets(emulator)
    actuator = InProcessActuator(actuator_config(nats_server.url, _kubeconfig(emulator), "a-1"))
    await actuator.start()
    try:
        first = engine_upgrade("node1-vol-0", owner_tests("node-1"))
        await publish_command(bus, first)
        assert (await answered(bus, [first]))[first.id].outcome is Outcome.APPLIED
        # The operator rolls the volume back; the same decision (same id) comes again.
        rolled_back = volume("node1-vol-0")
        rolled_back["status"]["ownerID"] = "node-1"
        emulator.load("longhorn.io", "volumes", [rolled_back])
        emulator.write_log.clear()
        await publish_command(bus, first, msg_id="the-same-decision-again")
        # Its result repeats the first one's (LH_RESULTS stores a command's outcome once): the
        # facts tell, and the API server saw the write again.
        await eventually(
            lambda: bool(writes_to(emulator, "node1-vol-0")),
            what="the volume upgraded again (answered from memory: nothing written)",
        )
        assert _image(emulator, "node1-vol-0") == DEFAULT_IMAGE
    finally:
        assert await actuator.stop() == 0


@pytest.mark.parametrize("lease", [False, True], ids=["no-lease", "with-lease"])
async def test_a_huge_term_never_applied_locks_no_one_out(
    emulator: Emulator, bus: Bus, nats_server: NatsServer, lease: bool
) -> None:
    """A command with term 10^12 for a volume that does not exist passes the policy but writes
    nothing: its term is not learnt. Where the service holds a lease, a term beyond the lease
    key's revision is refused outright, by name."""
    seed_probe_targets(emulator)
    actuator = InProcessActuator(actuator_config(nats_server.url, _kubeconfig(emulator), "a-1"))
    await actuator.start()
    holder = Lease(bus, "engine-upgrade", "replica-a", ttl=5.0) if lease else None
    try:
        term = 1
        if holder is not None:
            await holder.start()
            await eventually(lambda: holder.is_leader, what="the lease to be held")
            term = holder.term
        forged = engine_upgrade("no-such-volume", owner_tests("node-1"), term=10**12)
        await publish_command(bus, forged)
        found = (await answered(bus, [forged]))[forged.id]
        if lease:
            assert found.outcome is Outcome.REJECTED_BY_POLICY
            assert "beyond the engine-upgrade lease's revision" in found.detail
        else:
            assert found.outcome is Outcome.NOT_FOUND
        real = engine_upgrade("node1-vol-0", owner_tests("node-1"), term=term)
        await publish_command(bus, real)
        assert (await answered(bus, [real]))[real.id].outcome is Outcome.APPLIED
    finally:
        if holder is not None:
            await holder.stop()
        assert await actuator.stop() == 0
