"""LH_HISTORY: the bus keeps its own history, so any decision of the last days can be replayed.

LH_OBJECTS keeps the last few events per object and LH_COMMANDS is a work queue the actuator
drains, so neither can say, on Monday, why a volume was upgraded on Saturday. LH_HISTORY keeps every
object event, every command as published and every result for `history_max_age` (7 days by
default) or `history_max_bytes`, whichever comes first (oldest messages go first).

Why a stream with *sources*, not one that captures the subjects or a mirror:
* a subject belongs to one stream only, so a history stream cannot also take `lh.obj.>` and
  `lh.cmd.>`; and a mirror copies exactly one stream, where three (or more) are needed;
* JetStream sources a work-queue stream through an internal consumer that removes nothing
  (nats-server 2.10+): the actuator still gets, and alone acknowledges, every command, and the
  history holds each command whole, as published, whether the actuator took it at once or not;
* sourcing is JetStream's own, replicated and resumable: a restarted server or stream leader goes
  on from the last sourced sequence of each origin (recorded in each message's
  `Nats-Stream-Source` header), so nothing is skipped and nothing is copied twice, and the stream
  is replicated like every other (`replicas`). Messages also keep their `Nats-Msg-Id`, so the
  history deduplicates within the shortest window of its origins (never longer: a retried
  command with the same id, published again after its origin's window, is a new message there and
  must be one here too).

The sources are derived from the contract's stream definitions (`history_sources`): every stream
of the contract but the dead letters. A stream added to the contract (say, one command stream per
service) is recorded without a change here.

The history has no subjects, so no client can publish into it; reading it is the `reader` user's
(corral_bus.permissions), changing or purging it the `admin`'s alone.

JetStream sets a source up a moment after the stream is created (and again after a server restart),
and until then nothing is copied; a command the actuator finished (a work queue forgets it) or an
object event rolled up in that moment would never reach the history. So the setup step waits until
every source is active (`wait_sourcing`) before any service starts. After a NATS restart the same
moment exists; a command finished in it is still in the history as its result (what
corral_decision.recording compares by id), only not whole.

Sizing: bytes per message * messages per day * days kept; `bench/bench_history.py` measures the
first two on a real wave (see its report under bench/results and docs/history.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig, StreamSource

from corral_model.subjects import DEAD_STREAM, HISTORY_STREAM

DEFAULT_MAX_AGE_S = 7 * 24 * 3600.0
DEFAULT_MAX_BYTES = 1024**3
"""1 GiB: fits the chart's 10 GiB JetStream volume beside the other streams; docs/history.md says
how many volumes' week that holds, at the cost per volume bench/bench_history.py measures."""
NOT_RECORDED = frozenset({DEAD_STREAM})
"""Contract streams the history does not source: dead letters say what could not be used, and
carry the original payload already (LH_DEAD keeps them for 30 days)."""


def history_sources(contract: Sequence[StreamConfig]) -> list[str]:
    """The names of the contract streams the history records, in contract order."""
    return [c.name for c in contract if c.name is not None and c.name not in NOT_RECORDED]


def history_config(
    contract: Sequence[StreamConfig],
    *,
    max_age: float,
    max_bytes: int,
    replicas: int,
    storage: StorageType,
) -> StreamConfig:
    """LH_HISTORY sourcing every recorded stream of `contract`."""
    recorded = [c for c in contract if c.name in history_sources(contract)]
    windows = [c.duplicate_window for c in recorded if c.duplicate_window]
    return StreamConfig(
        name=HISTORY_STREAM,
        description="Every object event, command and result, for replay and explain after the fact.",
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
