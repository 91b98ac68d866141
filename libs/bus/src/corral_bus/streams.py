"""The streams of the bus contract (DESIGN.md), created or brought up to date at start-up.

Who creates them: the setup step (`corral bus init`, corral_bus.setup.prepare_bus), run as NATS's
`admin` user before the services start (by `corral run`, a Helm hook Job, a compose one-shot).
Where NATS enforces permissions no service may create or change a stream; each service only checks
at start-up that the streams are there as the contract says (`check_streams`: one stream-info
request each) and, where the server is open (tests, a bare `nats-server`), creates or updates
them itself, so whichever starts first creates them. Running either twice changes nothing. A stream whose
configuration cannot be changed in place (JetStream refuses to change retention, for one) fails
loudly with `StreamConfigError` instead of leaving a service running on the wrong contract.

LH_OBJECTS keeps the last N events per object. A DELETED event is a tombstone: it carries a `Nats-TTL`
(it goes after a while, so the stream does not grow with every object that ever existed), and the
watcher publishes it N times, so that it pushes the object's older events out and bootstrap cannot
resurrect the object once the tombstone is gone (corral_watcher.tombstones). See `tombstone_headers`.

The API server is the truth and LH_OBJECTS its copy, so no one may cut that copy short: the stream
refuses rollup headers (the server cannot tell a tombstone's `Nats-Rollup: sub` from a forged
`Nats-Rollup: all`, which empties the stream), purges and message deletes. Those denials cannot be
lifted on an existing stream (JetStream refuses to), and `corral bus init` sets them on one made
before.

LH_HISTORY (corral_bus.history) records the others for days. Its age and size are the setup step's
to set (`corral bus init --history-max-age`), so a service's start-up check only makes sure it is
there, and never changes it back to the defaults.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError

from corral_bus.errors import StreamConfigError
from corral_bus.history import (
    DEFAULT_MAX_AGE_S,
    DEFAULT_MAX_BYTES,
    history_config,
    recorded,
    wait_sourcing,
)
from corral_model import subjects

TTL_HEADER = "Nats-TTL"
ROLLUP_HEADER = "Nats-Rollup"
MSG_ID_HEADER = "Nats-Msg-Id"
EXPECTED_LAST_SUBJECT_SEQ_HEADER = "Nats-Expected-Last-Subject-Sequence"
_DAY = 24 * 3600.0
log = logging.getLogger("corral.bus")
# JetStream error code: "stream name already in use with a different configuration".
_STREAM_NAME_IN_USE = 10058


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Tunables of the bus contract; the defaults are what DESIGN.md describes."""

    objects_history: int = 5
    """Events kept per object (max_msgs_per_subject of LH_OBJECTS)."""
    tombstone_ttl: float = _DAY
    """How long a DELETED event stays in LH_OBJECTS."""
    objects_dedup_window: float = 120.0
    commands_dedup_window: float = 60.0
    """Long enough to drop a restarted decider's re-publication; shorter than every decider's
    retry back-off (engine-upgrade: 120 s), or the retry of a refused or expired command, which
    carries the same deterministic id, would be dropped as a duplicate. A late duplicate past the
    window is harmless: its preconditions no longer hold, or the actuator finds it expired."""
    results_max_age: float = 7 * _DAY
    dead_max_age: float = 30 * _DAY
    replicas: int = 1
    """Copies JetStream keeps of each stream: 1 on a single server, 3 on a 3-server cluster (R3: one
    server may be lost, or restarted, without losing an acknowledged message). An existing stream
    is never lowered by `ensure_streams` (see `ensure_stream`)."""
    memory: bool = False
    """Memory storage: for benchmarks and throwaway runs only."""
    history_max_age: float = DEFAULT_MAX_AGE_S
    """How long LH_HISTORY keeps a message (corral_bus.history)."""
    history_max_bytes: int = DEFAULT_MAX_BYTES
    """How large LH_HISTORY may grow before its oldest messages go."""
    command_senders: tuple[str, ...] = subjects.COMMAND_SENDERS
    """Who sends commands, each to a command stream of its own (a test adds its toy decider)."""


def stream_configs(settings: StreamSettings | None = None) -> list[StreamConfig]:
    s = settings or StreamSettings()
    storage = StorageType.MEMORY if s.memory else StorageType.FILE
    contract = recorded(contract_configs(s, storage))
    history = history_config(
        contract,
        max_age=s.history_max_age,
        max_bytes=s.history_max_bytes,
        replicas=s.replicas,
        storage=storage,
    )
    return [*contract, advisories_config(s, storage), history]


def contract_configs(s: StreamSettings, storage: StorageType) -> list[StreamConfig]:
    return [
        StreamConfig(
            name=subjects.OBJECTS_STREAM,
            description="The cluster as events: last N per object, tombstones with a TTL.",
            subjects=[f"{subjects.OBJECTS_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            max_msgs_per_subject=s.objects_history,
            duplicate_window=s.objects_dedup_window,
            allow_rollup_hdrs=False,
            deny_delete=True,
            deny_purge=True,
            allow_msg_ttl=True,
            allow_direct=True,
            storage=storage,
            num_replicas=s.replicas,
            discard=DiscardPolicy.OLD,
        ),
        *(command_config(s, storage, service) for service in s.command_senders),
        StreamConfig(
            name=subjects.RESULTS_STREAM,
            description="What the actuator did with each command, and why.",
            subjects=[f"{subjects.RESULTS_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=s.results_max_age,
            duplicate_window=min(120.0, s.results_max_age),
            storage=storage,
            num_replicas=s.replicas,
            discard=DiscardPolicy.OLD,
        ),
        StreamConfig(
            name=subjects.DEAD_STREAM,
            description="Messages that could not be decoded or exceeded their deliveries, with the reason.",
            subjects=[f"{subjects.DEAD_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=s.dead_max_age,
            duplicate_window=min(120.0, s.dead_max_age),
            storage=storage,
            num_replicas=s.replicas,
            discard=DiscardPolicy.OLD,
        ),
    ]


def command_config(s: StreamSettings, storage: StorageType, service: str) -> StreamConfig:
    """One sender's commands for the actuator: a work queue of its own, so its deduplication by
    command id is its own (subjects.COMMANDS_STREAM says why)."""
    return StreamConfig(
        name=subjects.command_stream(service),
        description=f"{service}'s decisions for the actuator (work queue, deduplicated by command id).",
        subjects=[f"{subjects.COMMANDS_PREFIX}.{subjects.escape_token(service)}.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        duplicate_window=s.commands_dedup_window,
        # A decider reads its own queued commands in batches (corral_bus.batchget).
        allow_direct=True,
        storage=storage,
        num_replicas=s.replicas,
        discard=DiscardPolicy.OLD,
    )


def advisories_config(s: StreamSettings, storage: StorageType) -> StreamConfig:
    """JetStream announces a message that exhausted a consumer's deliveries only as a core NATS
    advisory: lost unless someone listens at that moment. This stream keeps them (a day is plenty:
    the consumer that parks them is the one whose deliveries they report)."""
    return StreamConfig(
        name=subjects.ADVISORIES_STREAM,
        description="Max-deliveries advisories of corral's durable consumers, until parked.",
        subjects=[f"{subjects.MAX_DELIVERIES_ADVISORY_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        max_age=_DAY,
        duplicate_window=120.0,
        storage=storage,
        num_replicas=s.replicas,
        discard=DiscardPolicy.OLD,
    )


_COMPARED = (
    "subjects",
    "retention",
    "max_msgs_per_subject",
    "duplicate_window",
    "allow_rollup_hdrs",
    "deny_delete",
    "deny_purge",
    "allow_msg_ttl",
    "allow_direct",
    "max_age",
    "max_bytes",
    "storage",
    "num_replicas",
    "discard",
)


def differences(want: StreamConfig, have: StreamConfig) -> list[str]:
    """The fields the contract sets that `have` (the server's) holds otherwise."""
    out = []
    want_sources = sorted(s.name for s in want.sources or [])
    have_sources = sorted(s.name for s in have.sources or [])
    if want_sources != have_sources:
        out.append(f"sources {have_sources!r} (the contract says {want_sources!r})")
    want_copy = (want.republish.src, want.republish.dest) if want.republish else None
    have_copy = (have.republish.src, have.republish.dest) if have.republish else None
    if want_copy != have_copy:
        out.append(f"republish {have_copy!r} (the contract says {want_copy!r})")
    for name in _COMPARED:
        wanted = getattr(want, name, None)
        if wanted is None:
            continue  # the server's default is the contract's
        held = getattr(have, name, None)
        if isinstance(wanted, list) and isinstance(held, list):
            same = sorted(wanted) == sorted(held)
        else:
            same = wanted == held
        if not same:
            out.append(f"{name} {held!r} (the contract says {wanted!r})")
    return out


async def check_streams(js: JetStreamContext, settings: StreamSettings | None = None) -> None:
    """What a service does at start-up: make sure the contract's streams are there as it says.

    Streams found as the contract says cost one stream-info request each and nothing is written,
    so a service whose NATS user may not manage streams starts fine after the setup step. Otherwise
    they are created or updated (`ensure_stream`); where that is not permitted, StreamConfigError
    says to run the setup step."""
    for config in stream_configs(settings):
        assert config.name is not None
        try:
            have = (await js.stream_info(config.name)).config
        except NotFoundError:
            problem = "missing"
        else:
            if config.name == subjects.HISTORY_STREAM:
                continue  # tuned by the setup step: a service only needs it there
            diff = differences(config, have)
            if not diff:
                continue
            problem = "differs: " + "; ".join(diff)
        try:
            await ensure_stream(js, config)
            if config.name == subjects.HISTORY_STREAM:
                await wait_sourcing(js)
        except (StreamConfigError, TimeoutError, APIError) as e:
            refused = isinstance(e, StreamConfigError) and e.refused
            raise StreamConfigError(
                f"stream {config.name} {problem}, and it could not be set up here ({e}); run the setup"
                " step (`corral bus init`) as NATS's admin user",
                refused=refused,
            ) from e


async def ensure_streams(js: JetStreamContext, settings: StreamSettings | None = None) -> None:
    """Create the streams, or update them to `settings`; idempotent. Returns once the history
    records (corral_bus.history.wait_sourcing)."""
    await retire_shared_commands(js)
    for config in stream_configs(settings):
        await ensure_stream(js, config)
    await wait_sourcing(js)


async def retire_shared_commands(js: JetStreamContext) -> int:
    """Delete the one LH_COMMANDS stream of releases before the per-sender command streams (its
    subjects overlap theirs, so they cannot be created beside it); returns the commands it still
    held. Nothing is lost for good: commands are decisions derived from the cluster's state, and
    each decider issues a command the actuator never answered again once its expectation expires
    (its `command_ttl`)."""
    try:
        info = await js.stream_info(subjects.COMMANDS_STREAM)
    except NotFoundError:
        return 0
    queued = info.state.messages
    await js.delete_stream(subjects.COMMANDS_STREAM)
    if queued:
        log.warning(
            "deleted the shared %s stream of an earlier release with %d commands queued: their senders"
            " issue them again once their expectations expire",
            subjects.COMMANDS_STREAM,
            queued,
        )
    return queued


def _refused(error: APIError) -> bool:
    """The server answered and refused the configuration itself (a JetStream error code), rather
    than the request not getting through (permissions, no responders: 503)."""
    return bool(error.err_code) and error.code != 503


async def ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    """Create `config`, or update the stream to it. A stream that has more replicas than asked for
    keeps them: lowering the copies of the bus is an operator's decision, never a side effect of one
    service starting with a stale or default setting during a rolling change."""
    try:
        await js.add_stream(config)
        return
    except APIError as e:
        if e.err_code != _STREAM_NAME_IN_USE:
            raise StreamConfigError(
                f"cannot create stream {config.name}: {e.description}", refused=_refused(e)
            ) from e
    assert config.name is not None
    existing = (await js.stream_info(config.name)).config.num_replicas or 1
    if existing > (config.num_replicas or 1):
        config = dataclasses.replace(config, num_replicas=existing)
    try:
        await js.update_stream(config)
    except APIError as e:
        raise StreamConfigError(
            f"stream {config.name} exists with a configuration that cannot be changed to the contract's:"
            f" {e.description}; delete or migrate it"
        ) from e


async def delete_streams(js: JetStreamContext) -> None:
    """Remove the contract's streams (tests and `make run` resets only)."""
    await retire_shared_commands(js)
    for config in stream_configs():
        assert config.name is not None
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(config.name)


def tombstone_headers(ttl: float) -> dict[str, str]:
    """Headers of a DELETED event: expire after `ttl` seconds (LH_OBJECTS refuses rollups)."""
    return {TTL_HEADER: f"{max(1, round(ttl))}s"}
