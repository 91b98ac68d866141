"""What a consumer's handler receives: one JetStream message, typed, with its delivery facts.

The handler never sees the nats-py `Msg`: acking is the consumer's job (decided by how the handler
returns), so a handler cannot ack twice or forget to. It can decode the payload into an envelope
(`delivery.decode(Command)`), whose `SchemaError` the consumer turns into a dead letter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec
from nats.aio.msg import Msg
from opentelemetry.context import Context

from corral_model import codec

T = TypeVar("T")


class Delivery(msgspec.Struct, frozen=True):
    """One per message a consumer handles (the actuator: one per command): a Struct, since a frozen
    dataclass's `__init__` sets each of its ten fields through `object.__setattr__` (about 2 µs)."""

    data: bytes
    subject: str
    headers: Mapping[str, str]
    num_delivered: int
    """1 on the first delivery, 2 on the first redelivery, ..."""
    max_deliver: int
    stream: str
    stream_seq: int
    num_pending: int
    """Messages still waiting for this consumer after this one."""
    trace_context: Context
    """The context it was published under (also made current while the handler runs)."""
    msg: Msg

    @property
    def is_last_attempt(self) -> bool:
        return self.max_deliver > 0 and self.num_delivered >= self.max_deliver

    @property
    def msg_id(self) -> str:
        return self.headers.get("Nats-Msg-Id", "")

    def decode(self, type_: type[T]) -> T:
        """Decode the payload as `type_`; raises `corral_model.codec.SchemaError` if it is not one."""
        return codec.decode(self.data, type_)

    async def in_progress(self) -> None:
        """Tell JetStream the handler is still busy, resetting the ack timer (long handlers)."""
        await self.msg.in_progress()
