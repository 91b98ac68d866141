"""LH_HISTORY: the bus keeps its own history, so any decision of the last days can be replayed.

LH_OBJECTS keeps the last few events per object and LH_COMMANDS is a work queue the actuator
drains, so neither can say, on Monday, why a volume was upgraded on Saturday. LH_HISTORY keeps every
object event, every command as published and every result for `history_max_age` (7 days by
default) or `history_max_bytes`, whichever comes first (oldest messages go first).

How JetStream fills it, by the kind of stream recorded (`recorded`, applied to the contract's
stream definitions, so a stream added to the contract, say one command stream per service, is
recorded without a change here):

* a limits stream (LH_OBJECTS, LH_RESULTS) is a *source* of LH_HISTORY. Sourcing is JetStream's
  own, replicated and resumable: a restarted server or stream leader goes on from the last sourced
  sequence of each origin (the `Nats-Stream-Source` header of each copy), so nothing is skipped or
  copied twice. A copy is stored as a plain message: the tombstone's `Nats-Rollup` and `Nats-TTL`
  act in LH_OBJECTS only, so the history keeps an object's events after its deletion, and the
  tombstone itself.
* a work-queue stream (LH_COMMANDS) is not: a source is a consumer, and on a work queue a message
  acked by the actuator stays while another consumer has not had it, so the queue stopped draining
  (nats-server 2.15, measured). Instead the stream *republishes* every message it stores to
  `lh.hist.<its subject>` (RePublish, done by the stream as it stores the message, before the
  actuator can take it), which LH_HISTORY takes as its own subjects. The copy carries the
  original's headers and `Nats-Stream`, `Nats-Subject`, `Nats-Sequence` (where it was stored).
  A republish is not acknowledged: one made while LH_HISTORY cannot store (its leader moving in a
  cluster) is lost, and that command is in the history only as its result (which
  corral_decision.recording compares by id just as well).

Why not one stream taking the subjects, or a mirror: a subject belongs to one stream only, and a
mirror copies exactly one stream where three (or more) are needed.

Messages keep their `Nats-Msg-Id`, so the history deduplicates within the shortest window of its
origins (never longer: a retried command with the same id, published again after its origin's
window, is a new message there and must be one here too).

Only the server writes the history: `lh.hist.>` is in no user's publish permissions but `admin`'s
(corral_bus.permissions); reading it is the `reader` user's, changing or purging it `admin`'s alone.

JetStream sets a source up a moment after the stream is created (and again after a server restart),
and until then nothing is copied; an object event rolled up in that moment would never reach the
history. So the setup step waits until every source is active (`wait_sourcing`) before any
service starts.

Sizing: bytes per message * messages per day * days kept; `bench/bench_history.py` measures them on
a real wave (its report under bench/results, and docs/history.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence

from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    RePublish,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
)

from corral_model.subjects import DEAD_STREAM, HISTORY_PREFIX, HISTORY_STREAM

DEFAULT_MAX_AGE_S = 7 * 24 * 3600.0
DEFAULT_MAX_BYTES = 1024**3
"""1 GiB: JetStream reserves a stream's max_bytes on every server holding a replica, so the default
must fit a modest store (the test cluster's 2 GB); a week of about 490 volumes at the cost
bench/bench_history.py measured (docs/history.md). The chart and compose, which know their store
(10 GiB), set 4 GiB."""
NOT_RECORDED = frozenset({DEAD_STREAM})
"""Contract streams the history does not record: dead letters say what could not be used, and
carry the original payload already (LH_DEAD keeps them for 30 days)."""


def _republished(config: StreamConfig) -> bool:
    return config.retention == RetentionPolicy.WORK_QUEUE


def recorded(contract: Sequence[StreamConfig]) -> list[StreamConfig]:
    """`contract` with every work-queue stream the history records republishing what it stores to
    `lh.hist.<subject>` (the others are sourced: `history_config`)."""
    out = []
    for config in contract:
        if config.name not in NOT_RECORDED and _republished(config):
            config = dataclasses.replace(config, republish=RePublish(src=">", dest=f"{HISTORY_PREFIX}.>"))
        out.append(config)
    return out


def history_sources(contract: Sequence[StreamConfig]) -> list[str]:
    """The names of the contract streams the history sources, in contract order."""
    return [
        c.name for c in contract if c.name is not None and c.name not in NOT_RECORDED and not _republished(c)
    ]


def history_config(
    contract: Sequence[StreamConfig],
    *,
    max_age: float,
    max_bytes: int,
    replicas: int,
    storage: StorageType,
) -> StreamConfig:
    """LH_HISTORY sourcing every recorded limits stream of `contract` and taking what its
    work-queue streams republish (`recorded`)."""
    kept = [c for c in contract if c.name not in NOT_RECORDED]
    windows = [c.duplicate_window for c in kept if c.duplicate_window]
    return StreamConfig(
        name=HISTORY_STREAM,
        description="Every object event, command and result, for replay and explain after the fact.",
        subjects=[f"{HISTORY_PREFIX}.>"] if any(_republished(c) for c in kept) else None,
        sources=[StreamSource(name=name) for name in history_sources(contract)],
        retention=RetentionPolicy.LIMITS,
        max_age=max_age,
        max_bytes=max_bytes,
        duplicate_window=min([*windows, max_age]),
        allow_direct=True,
        storage=storage,
        num_replicas=replicas,
        discard=DiscardPolicy.OLD,
    )


async def wait_sourcing(js: JetStreamContext, timeout_s: float = 15.0) -> None:
    """Return once every source of LH_HISTORY is active (JetStream reports `active` -1 until it
    has set the source up); TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await js.stream_info(HISTORY_STREAM)
        idle = [s.name for s in info.sources or [] if s.active is None or s.active < 0]
        if not idle:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{HISTORY_STREAM} does not source {', '.join(idle)} yet")
        await asyncio.sleep(0.02)
