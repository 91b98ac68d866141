"""corral_bus: the NATS JetStream plumbing every corral service shares.

API summary (all async unless noted; see each module for the why)::

    bus = await connect(servers, name)                      # Bus(nc, js, reconnects, connected)
    await ensure_streams(bus.js, StreamSettings())          # the four streams of DESIGN.md, idempotent
    await bus.close()

    pub = Publisher(bus, window=1024)                       # pipelined acks (shared core: acks.AckPipeline)
    await pub.publish(subject, payload, msg_id=..., headers=None, ttl=None)   # fast while window has room
    await pub.flush()                                       # all acked, else raises PublishError(failures)
    await pub.close()                                       # stop listening for acks (flush first)
    headers=tombstone_headers(ttl)                          # for DELETED events into LH_OBJECTS

    consumer = Consumer(bus, ConsumerSpec(stream, durable, filter_subjects=(...), backoff=(1, 5, 30),
                                          max_deliver=5, max_ack_pending=256, batch=64,
                                          ack_wait=30, handler_timeout=300), handler)
    consumer.start(); await consumer.ready.wait(); ...; await consumer.stop()
    async def handler(d: Delivery) -> None                  # return: ack
        d.decode(Command)                                   # SchemaError -> LH_DEAD, ack
        raise TransientError("...", delay=None)             # nak, redelivered after backoff
        raise PermanentError("...")                         # LH_DEAD with reason, ack
        any other exception / handler_timeout               # like TransientError (logged)
        last allowed delivery fails, or a handler crashed   # LH_DEAD "max-deliveries", ack

    lease = Lease(bus, name, holder, ttl=10.0, on_change=cb)  # cb(is_leader: bool); KV compare-and-set
    await lease.start(); lease.is_leader; await lease.stop()  # stop releases the lease

    reader = BootstrapReader(bus, ["lh.obj.volume.>", ...])  # LH_OBJECTS by default; await reader.start()
    async for m in reader: m.decode(ObjectEvent[Volume])    # StreamMessage: last per subject, then new
        m.bootstrap / m.caught_up; reader.ready             # ready: set with the last snapshot message
    await follow(reader, on_message, on_bootstrapped)       # callback style; await reader.close()

Trace context: `Publisher.publish` injects the current W3C `traceparent`; the consumer extracts it
and makes it current while the handler runs (`Delivery.trace_context`).
"""

from corral_bus.bootstrap import BootstrapReader, StreamMessage, follow
from corral_bus.connection import Bus, connect
from corral_bus.consumer import Consumer, ConsumerSpec, Handler
from corral_bus.deadletter import DeadReason
from corral_bus.delivery import Delivery
from corral_bus.errors import (
    BusError,
    NotAuthorized,
    PermanentError,
    PublishError,
    PublishFailure,
    StreamConfigError,
    TransientError,
)
from corral_bus.lease import Lease, LeaseRecord
from corral_bus.publisher import Publisher
from corral_bus.streams import (
    MSG_ID_HEADER,
    TTL_HEADER,
    StreamSettings,
    ensure_streams,
    stream_configs,
    tombstone_headers,
)
from corral_bus.tracing import extract_trace, inject_trace

__all__ = [
    "MSG_ID_HEADER",
    "TTL_HEADER",
    "BootstrapReader",
    "Bus",
    "BusError",
    "Consumer",
    "ConsumerSpec",
    "DeadReason",
    "Delivery",
    "Handler",
    "Lease",
    "LeaseRecord",
    "NotAuthorized",
    "PermanentError",
    "PublishError",
    "PublishFailure",
    "Publisher",
    "StreamConfigError",
    "StreamMessage",
    "StreamSettings",
    "TransientError",
    "connect",
    "ensure_streams",
    "extract_trace",
    "follow",
    "inject_trace",
    "stream_configs",
    "tombstone_headers",
]
