"""The reader's consumers are bounded (corral_bus.read_consumers): issue 29's probe created
durable consumers on LH_OBJECTS without end with the reader's credentials, which every operator's
CLI holds. On the locked-down bus the reader may take only its own few names, one consumer each.
"""

from __future__ import annotations

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from corral_bus import BootstrapReader, Bus
from corral_bus.permissions import READER, READER_CONSUMERS
from corral_bus.read_consumers import ConsumersExhausted, create_read_consumer
from corral_model.subjects import OBJECTS_STREAM
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.secure_nats import connect_as

pytestmark = pytest.mark.integration

READ = ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30.0, mem_storage=True)
ROGUE = ConsumerConfig(name="rogue", ack_policy=AckPolicy.NONE, inactive_threshold=30.0, mem_storage=True)


async def reader_consumers(admin: Bus) -> list[str]:
    return sorted(info.name or "" for info in await admin.js.consumers_info(OBJECTS_STREAM) if info.name)


async def test_the_reader_holds_at_most_its_bound_and_says_so(
    secure_nats: NatsServer, secure_bus: Bus
) -> None:
    reader = await connect_as(secure_nats, READER)
    try:
        taken = [await create_read_consumer(reader, OBJECTS_STREAM, READ) for _ in range(READER_CONSUMERS)]
        assert len({info.name for info in taken}) == READER_CONSUMERS
        with pytest.raises(ConsumersExhausted, match=f"all {READER_CONSUMERS} consumers .* on LH_OBJECTS"):
            await create_read_consumer(reader, OBJECTS_STREAM, READ)
        assert len(await reader_consumers(secure_bus)) == READER_CONSUMERS

        # A name of its own choosing, or a server-named one, is denied by the server itself.
        for config in (READ, ROGUE):
            reader.denials.clear()
            with pytest.raises(Exception):  # noqa: B017 - no answer comes: the request times out
                await reader.js.add_consumer(OBJECTS_STREAM, config)
            await eventually(lambda: len(reader.denials) > 0, within=5.0, what="the server denying it")
        assert len(await reader_consumers(secure_bus)) == READER_CONSUMERS

        # A name freed is taken again.
        freed = taken[3].name
        assert freed is not None
        await reader.js.delete_consumer(OBJECTS_STREAM, freed)
        again = await create_read_consumer(reader, OBJECTS_STREAM, READ)
        assert again.name == freed
    finally:
        await reader.close()


async def test_two_readers_never_share_a_consumer(secure_nats: NatsServer, secure_bus: Bus) -> None:
    """The same configuration twice (two operators running the same command) is two consumers:
    a pull consumer hands each message to one puller only, so a shared one would split the view."""
    first, second = await connect_as(secure_nats, READER), await connect_as(secure_nats, READER)
    readers = [BootstrapReader(bus, ["lh.obj.>"]) for bus in (first, second)]
    try:
        for reader in readers:
            await reader.start()
        assert len(await reader_consumers(secure_bus)) == 2
    finally:
        for reader in readers:
            await reader.close()
        await first.close()
        await second.close()
