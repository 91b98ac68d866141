"""The upper bound of a believable leader term: the revision the service's lease has reached.

A decider's lease term is the revision of its key in the lease bucket when it took the lease
(corral_bus.lease), so no real leader's term is beyond that key's current revision. The actuator
may read the bucket, so a term newer than any it has learnt is checked against it once: a forged
command with term 10^12 is refused by name instead of becoming the newest term and locking the real
leader out. Only a term newer than the newest learnt costs a read, which is once per change of
leader.
"""

from __future__ import annotations

from nats.js.errors import NotFoundError

from corral_bus import Bus
from corral_bus.errors import TransientError
from corral_bus.permissions import LEASE_BUCKET


class LeaseRevisions:
    def __init__(self, bus: Bus, bucket: str = LEASE_BUCKET) -> None:
        self._bus = bus
        self._bucket = bucket

    async def revision(self, service: str) -> int | None:
        """The revision of `service`'s lease key, or None when it never held one (an unfenced
        producer: the policy's `fenced` decides). Raises TransientError when NATS cannot say."""
        try:
            message = await self._bus.js.get_last_msg(f"KV_{self._bucket}", f"$KV.{self._bucket}.{service}")
        except NotFoundError:
            return None
        except Exception as e:
            raise TransientError(f"reading the {service} lease to check a new term: {e}", delay=0.5) from e
        return message.seq
