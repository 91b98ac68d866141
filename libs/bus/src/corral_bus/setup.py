"""The setup step: the contract's streams and the lease bucket, made by NATS's admin user.

Where NATS enforces corral's permissions (corral_bus.permissions) no service may create, change or
delete a stream, so something with the `admin` user makes them before the services start:
`corral bus init` (what `corral run` does once NATS is up, a Helm hook Job and a compose one-shot
service run). It is idempotent, brings existing streams up to the contract, and is safe to run
while services are running.
"""

from __future__ import annotations

import asyncio

from corral_bus.connection import Bus
from corral_bus.errors import StreamConfigError
from corral_bus.lease import LEASE_BUCKET, open_bucket
from corral_bus.streams import StreamSettings, ensure_streams


async def prepare_bus(bus: Bus, settings: StreamSettings | None = None, *, attempts: int = 1) -> None:
    """Create or update the streams and the lease bucket.

    `attempts` > 1 retries the one error a just-deleted stream of the same name causes ("error
    creating store": the server removes a deleted stream's store in the background)."""
    for attempt in range(attempts):
        try:
            await ensure_streams(bus.js, settings)
            break
        except StreamConfigError as e:
            if "error creating store" not in str(e) or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.05)
    await open_bucket(bus, LEASE_BUCKET)
