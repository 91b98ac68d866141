"""A snapshot of corral's streams as bundle entries, read without changing anything.

Two ways of reading, because the streams differ:

* LH_OBJECTS, LH_RESULTS, LH_DEAD (limits retention): an ephemeral pull consumer with
  `ack_policy=none`, in memory, reaped by the server when idle. It is one pass over the stream, fast
  at any size, and delivers nothing to anyone else.
* the commands (each sender's `LH_COMMANDS_<SENDER>`, labelled LH_COMMANDS in a bundle) are the
  actuator's work queues: JetStream refuses a consumer that does not ack explicitly on a work
  queue (and one overlapping the actuator's), and an acked message is gone. So their messages are
  read one by one with the stream's message-get API (`next_by_subj`), which involves no consumer at
  all. The queues are short: the actuator drains them.

Nothing is published. Reading stops at the end each stream had when reading began, so a busy bus
still gives a finite snapshot. Sequences start at `start_seq`, or at the first message stored at or
after `start_ns`.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from corral_bus import Bus
from corral_bus.read_consumers import ConsumersExhausted, create_read_consumer
from corral_cli.events.streams import delivery_facts
from corral_decision.bundle import BundleEntry, entry, parse_time, sorted_entries
from corral_model.subjects import (
    COMMAND_SENDERS,
    COMMANDS_PREFIX,
    COMMANDS_STREAM,
    OBJECTS_STREAM,
    command_stream,
    escape_token,
    unescape_token,
)

FETCH_BATCH = 512
FETCH_WAIT_S = 1.0
IDLE_REAP_S = 30.0


class ReadError(RuntimeError):
    """The bus cannot be read as asked (no such stream, no such sequence)."""


def parse_headers(block: bytes) -> dict[str, str]:
    """A NATS header block (`NATS/1.0\\r\\nKey: value\\r\\n…`) as a dict (the last value wins)."""
    headers: dict[str, str] = {}
    for line in block.decode("utf-8", "replace").split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep and key:
            headers[key.strip()] = value.strip()
    return headers


async def get_message(
    bus: Bus, stream: str, seq: int, subject: str | None = None
) -> Mapping[str, Any] | None:
    """The message at `seq` (with `subject`: the first matching one at or after it) through the
    stream's message-get API, as JetStream answers it; None past the end."""
    request: dict[str, Any] = {"seq": seq}
    if subject is not None:
        request["next_by_subj"] = subject
    reply = await bus.nc.request(
        f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps(request).encode(), timeout=5.0
    )
    answer = json.loads(reply.data)
    error = answer.get("error")
    if error:
        if error.get("code") == 404:
            return None
        raise ReadError(f"{stream}: {error.get('description', error)}")
    message: Mapping[str, Any] = answer["message"]
    return message


def _from_get(label: str, message: Mapping[str, Any]) -> tuple[int, BundleEntry]:
    time_ns = parse_time(message["time"])
    headers = parse_headers(base64.b64decode(message["hdrs"])) if message.get("hdrs") else {}
    data = base64.b64decode(message.get("data") or "")
    return time_ns, entry(label, int(message["seq"]), time_ns, message["subject"], headers, data)


async def read_commands(
    bus: Bus, filters: Sequence[str], *, start_ns: int | None = None
) -> list[tuple[int, BundleEntry]]:
    """Every queued command matching `filters`, from each sender's stream, as LH_COMMANDS entries
    (what bundles call the commands as a whole): the contract's senders, and any a filter names."""
    tokens = [f.split(".") for f in filters]
    named = [unescape_token(t[2]) for t in tokens if len(t) > 2 and t[2] not in ("*", ">")]
    found: list[tuple[int, BundleEntry]] = []
    for service in dict.fromkeys([*COMMAND_SENDERS, *named]):
        wanted = [f for f in (sender_filter(f, service) for f in filters) if f is not None]
        if wanted:
            found += await read_queue(
                bus, command_stream(service), wanted, start_ns=start_ns, label=COMMANDS_STREAM
            )
    return found


def sender_filter(subject_filter: str, service: str) -> str | None:
    """The part of a command filter (`lh.cmd.>`, `lh.cmd.*.volume.>`, `lh.cmd.im-restart.>`) that
    `service`'s stream holds, or None where it holds none of it."""
    tokens = subject_filter.split(".")
    if len(tokens) < 3:
        return None
    own = escape_token(service)
    if tokens[2] == ">":
        return f"{COMMANDS_PREFIX}.{own}.>"
    if tokens[2] in ("*", own):
        return ".".join([*tokens[:2], own, *tokens[3:]])
    return None


async def read_queue(
    bus: Bus,
    stream: str,
    filters: Sequence[str],
    *,
    start_seq: int = 1,
    start_ns: int | None = None,
    label: str | None = None,
) -> list[tuple[int, BundleEntry]]:
    """Every message of a work-queue stream matching `filters`, by message get: never consumed.
    `label`: the stream name the entries carry (the stream's own by default)."""
    found: dict[int, tuple[int, BundleEntry]] = {}
    for subject in filters:
        seq = max(1, start_seq)
        while True:
            message = await get_message(bus, stream, seq, subject)
            if message is None:
                break
            time_ns, record = _from_get(label or stream, message)
            if start_ns is None or time_ns >= start_ns:
                found[record.seq] = (time_ns, record)
            seq = record.seq + 1
    return [found[seq] for seq in sorted(found)]


def consumer_config(
    filters: Sequence[str],
    *,
    start_seq: int | None,
    start_ns: int | None,
    new: bool = False,
    last_per_subject: bool = False,
) -> ConsumerConfig:
    """An ephemeral, unacknowledged, in-memory consumer: it reads, nothing else."""
    if last_per_subject:
        policy, opt_seq, opt_time = DeliverPolicy.LAST_PER_SUBJECT, None, None
    elif new:
        policy, opt_seq, opt_time = DeliverPolicy.NEW, None, None
    elif start_ns is not None:
        policy, opt_seq, opt_time = DeliverPolicy.BY_START_TIME, None, _moment(start_ns)
    elif start_seq is not None and start_seq > 1:
        policy, opt_seq, opt_time = DeliverPolicy.BY_START_SEQUENCE, start_seq, None
    else:
        policy, opt_seq, opt_time = DeliverPolicy.ALL, None, None
    return ConsumerConfig(
        deliver_policy=policy,
        opt_start_seq=opt_seq,
        opt_start_time=opt_time,
        ack_policy=AckPolicy.NONE,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=list(filters) if len(filters) > 1 else None,
        inactive_threshold=IDLE_REAP_S,
        mem_storage=True,
        num_replicas=1,
    )


def _moment(time_ns: int) -> datetime.datetime:
    """A datetime at or before `time_ns` (datetimes stop at microseconds; `consume` cuts exactly)."""
    return datetime.datetime.fromtimestamp(time_ns // 1000 / 1_000_000, datetime.UTC)


async def consume(
    bus: Bus,
    stream: str,
    filters: Sequence[str],
    *,
    start_seq: int | None = None,
    start_ns: int | None = None,
    new: bool = False,
    follow: bool = False,
    on_ready: Callable[[], None] | None = None,
    last_per_subject: bool = False,
) -> AsyncIterator[tuple[int, BundleEntry]]:
    """The messages of a limits stream matching `filters`, in stream order, through an ephemeral
    consumer: up to the stream's end as of now, or on and on with `follow`. `on_ready` is called
    once the consumer exists (from then on nothing published is missed)."""
    info = await bus.js.stream_info(stream)
    end = info.state.last_seq
    config = consumer_config(
        filters, start_seq=start_seq, start_ns=start_ns, new=new, last_per_subject=last_per_subject
    )
    try:
        created = await create_read_consumer(bus, stream, config)
    except ConsumersExhausted as e:
        raise ReadError(str(e)) from e
    assert created.name is not None
    if on_ready is not None:
        on_ready()
    if not follow and (new or not created.num_pending):
        await _delete_consumer(bus, stream, created.name)
        return
    subscription = await bus.js.pull_subscribe_bind(consumer=created.name, stream=stream)
    try:
        while True:
            try:
                batch = await subscription.fetch(FETCH_BATCH, timeout=FETCH_WAIT_S)
            except TimeoutError:
                # Nothing within the wait: read to the end, unless the server is only slow (a
                # snapshot cut short would look complete).
                if follow or (await bus.js.consumer_info(stream, created.name)).num_pending:
                    continue
                return
            for msg in batch:
                seq, time_ns, pending = delivery_facts(msg.reply)
                if start_ns is None or time_ns >= start_ns:
                    yield time_ns, entry(stream, seq, time_ns, msg.subject, msg.headers, msg.data)
                if not follow and (pending == 0 or seq >= end):
                    return
    finally:
        await subscription.unsubscribe()
        await _delete_consumer(bus, stream, created.name)


async def _delete_consumer(bus: Bus, stream: str, name: str) -> None:
    with contextlib.suppress(Exception):  # the server reaps it after IDLE_REAP_S anyway
        await bus.js.delete_consumer(stream, name)


async def time_of_seq(bus: Bus, seq: int, stream: str = OBJECTS_STREAM) -> int:
    """The store time of the first message at or after `seq` in `stream` (ReadError: none)."""
    message = await get_message(bus, stream, seq, ">")
    if message is None:
        raise ReadError(f"{stream} holds no message at or after sequence {seq}")
    return parse_time(message["time"])


async def snapshot(
    bus: Bus,
    filters: Mapping[str, Sequence[str]],
    *,
    since_ns: int | None = None,
    from_seq: int | None = None,
) -> list[BundleEntry]:
    """Every message of the given streams (`filters_by_stream`) in bundle order. `from_seq` is an
    LH_OBJECTS sequence: LH_OBJECTS is read from it, the other streams from its store time."""
    start_ns = since_ns
    if from_seq is not None:
        start_ns = await time_of_seq(bus, from_seq)
    pairs: list[tuple[int, BundleEntry]] = []
    for stream, subjects in filters.items():
        try:
            if stream == COMMANDS_STREAM:
                pairs += await read_commands(bus, subjects, start_ns=start_ns)
            elif stream == OBJECTS_STREAM and from_seq is not None:
                pairs += [p async for p in consume(bus, stream, subjects, start_seq=from_seq)]
            else:
                pairs += [p async for p in consume(bus, stream, subjects, start_ns=start_ns)]
        except NotFoundError as e:
            raise ReadError(f"no stream {stream} on this bus") from e
    return sorted_entries(pairs)
