"""`corral events dump` and `corral events tail`: corral's bus as it is, read-only.

`dump` writes LH_OBJECTS, LH_COMMANDS and LH_RESULTS (or the `--subjects` given) as one JSON-lines
bundle in the streams' order (time, then stream, then sequence; see corral_decision.bundle), the
input of `corral replay`. On a bus with a history (LH_HISTORY) it reads the history instead (unless
`--no-history`): from `--since` to `--until`, after the context that rebuilds the view as of
`--since` (corral_cli.events.history), the very lines `corral replay --nats … --since` replays
(replay the file with the same `--since` to compare the same window); what the history cannot hold
is said on stderr. With `--follow` it goes on recording new messages (commands through a
core NATS subscription, so even the ones the actuator takes at once are kept whole) until
interrupted. `tail` prints one line per new message: time, stream, subject and a short summary.

Both only read: nothing is published, no work-queue message is consumed (events/reader.py).
Exit 0; 1 when NATS cannot be reached or the bus cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from corral_cli.nats_access import DEFAULT_NATS_URL as NATS_URL
from corral_cli.nats_access import AccessError, NatsAccess, add_nats_options, open_reader

DEFAULT_NATS_URL = os.environ.get("CORRAL_NATS_URL", NATS_URL)
CONNECT_TIMEOUT_S = 10.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(text: str) -> int:
    """A point in time as nanoseconds since the epoch: RFC 3339 / ISO-8601, epoch seconds, or a
    duration before now (`90s`, `15m`, `2h`, `1d`)."""
    from corral_decision.bundle import parse_time

    duration = _DURATION.match(text)
    if duration:
        return time.time_ns() - int(float(duration.group(1)) * _UNIT_S[duration.group(2)] * 1e9)
    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        if "T" in text and (text.endswith(("Z", "z")) or re.search(r"[+-]\d\d:\d\d$", text)):
            return parse_time(text)
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a time (ISO-8601, epoch seconds or e.g. 15m): {text!r}") from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1e6) * 1000


def add_bus_arguments(parser: argparse.ArgumentParser) -> None:
    add_nats_options(parser)  # a URL, a read-only user's credentials, or a port-forward
    parser.add_argument(
        "--subjects",
        nargs="+",
        metavar="SUBJECT",
        default=None,
        help="subject filters to read (default: lh.obj.> lh.cmd.> lh.res.>; lh.dead.> too if named)",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("events", help="read corral's bus: dump it to a bundle, or tail it")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    dump = actions.add_parser("dump", help="the streams as one ordered JSON-lines bundle on stdout")
    add_bus_arguments(dump)
    start = dump.add_mutually_exclusive_group()
    start.add_argument(
        "--since", type=parse_moment, default=None, help="from this time (ISO-8601, epoch s, 15m)"
    )
    start.add_argument(
        "--from-seq",
        type=int,
        default=None,
        metavar="N",
        help="from LH_OBJECTS sequence N (the other streams from that message's time)",
    )
    dump.add_argument(
        "--until", type=parse_moment, default=None, help="up to this time (ISO-8601, epoch s, 15m)"
    )
    dump.add_argument(
        "--output", "-o", default="-", metavar="FILE", help="write the bundle here (default stdout)"
    )
    dump.add_argument("--follow", action="store_true", help="then record new messages until interrupted")
    dump.add_argument(
        "--no-history",
        action="store_true",
        help="read the streams as they are now, not the bus's history (LH_HISTORY)",
    )
    dump.add_argument("--count", type=int, default=None, help="with --follow: stop after N new messages")
    dump.add_argument(
        "--ensure-streams",
        action="store_true",
        help="create the bus contract's streams first if they are missing, as every service does"
        " (to record a bus from before its first service starts)",
    )
    dump.set_defaults(func=run_dump)
    tail = actions.add_parser("tail", help="one line per new message, live")
    add_bus_arguments(tail)
    tail.add_argument("--count", type=int, default=None, help="stop after N messages")
    tail.set_defaults(func=run_tail)


def _subjects(args: argparse.Namespace) -> list[str]:
    from corral_cli.events.streams import DEFAULT_SUBJECTS

    return list(args.subjects or DEFAULT_SUBJECTS)


def _filters(args: argparse.Namespace) -> dict[str, list[str]]:
    from corral_cli.events.streams import filters_by_stream

    return filters_by_stream(_subjects(args))


async def with_bus(
    name: str, access: str | NatsAccess, body: Callable[[Any, asyncio.Event], Awaitable[int]]
) -> int:
    """Connect (bounded), run `body(bus, stop)` until it returns or SIGINT/SIGTERM sets `stop`."""
    from nats.errors import Error as NatsError

    from corral_cli.events.reader import ReadError

    if isinstance(access, str):
        access = NatsAccess(url=access)
    url = access.shown
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:
            bus, url = await open_reader(stack, access, f"corral-{name}", CONNECT_TIMEOUT_S)
        except AccessError as error:
            print(f"corral {name}: {error}", file=sys.stderr)
            return 1
        try:
            return await body(bus, stop)
        except (ReadError, NatsError, TimeoutError) as error:
            print(
                f"corral {name}: cannot read the bus at {url}: {error or type(error).__name__}",
                file=sys.stderr,
            )
            return 1


def _access(args: argparse.Namespace) -> NatsAccess | str:
    """How to reach the bus, from the options; a bad one (a missing creds file) exits 1 saying so."""
    try:
        return NatsAccess.from_args(args)
    except AccessError as error:
        print(f"corral events: {error}", file=sys.stderr)
        raise SystemExit(1) from error


def _write(out: IO[bytes], data: bytes) -> None:
    out.write(data)
    out.flush()


def run_dump(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as files:
        out: IO[bytes] = sys.stdout.buffer
        if args.output != "-":
            out = files.enter_context(Path(args.output).open("wb"))
        try:
            return asyncio.run(
                with_bus(
                    "events dump", NatsAccess.from_args(args), lambda bus, stop: _record(bus, stop, args, out)
                )
            )
        except KeyboardInterrupt:
            return 0
        except BrokenPipeError:
            return _reader_gone()


def _reader_gone() -> int:
    """The reader of stdout went away (`| head`): not an error. Point stdout at devnull so the
    interpreter's final flush does not complain again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


async def _record(bus: Any, stop: asyncio.Event, args: argparse.Namespace, out: IO[bytes]) -> int:
    from corral_cli.events.live import LiveFeed
    from corral_cli.events.reader import snapshot
    from corral_decision.bundle import encode, parse_time
    from corral_model.subjects import COMMANDS_STREAM, DEAD_STREAM

    if args.ensure_streams:
        from corral_bus import ensure_streams

        await ensure_streams(bus.js)
    filters = _filters(args)
    if not (args.follow or args.no_history) and args.from_seq is None and DEAD_STREAM not in filters:
        from corral_cli.events.history import has_history, read_history

        if await has_history(bus):
            window = await read_history(
                bus, since_ns=args.since, until_ns=args.until, subjects=_subjects(args)
            )
            for limit in window.limits():
                print(f"corral events dump: limit: {limit}", file=sys.stderr)
            for record in window.entries:
                out.write(encode(record))
            out.flush()
            return 0
    feed = LiveFeed(bus, filters)
    if args.follow:
        await feed.start()  # before the snapshot, so no command falls in between
    ends = {s: (await bus.js.stream_info(s)).state.last_seq for s in filters if s != COMMANDS_STREAM}
    try:
        records = await snapshot(bus, filters, since_ns=args.since, from_seq=args.from_seq)
        for record in records:
            if args.until is not None and parse_time(record.time) > args.until:
                continue
            if record.stream == COMMANDS_STREAM and record.headers.get("Nats-Msg-Id"):
                feed.seen_commands.add(record.headers["Nats-Msg-Id"])
            out.write(encode(record))
        out.flush()
        if not args.follow:
            return 0
        await feed.follow(after=ends)
        print("corral events dump: recording new messages (Ctrl-C to stop)", file=sys.stderr, flush=True)
        written = 0
        async for record in feed.entries(stop):
            _write(out, encode(record))
            written += 1
            if args.count is not None and written >= args.count:
                break
        return 0
    finally:
        await feed.close()


def run_tail(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(
            with_bus("events tail", NatsAccess.from_args(args), lambda bus, stop: _tail(bus, stop, args))
        )
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        return _reader_gone()


async def _tail(bus: Any, stop: asyncio.Event, args: argparse.Namespace) -> int:
    from corral_cli.events.live import LiveFeed
    from corral_cli.events.summary import tail_line

    feed = LiveFeed(bus, _filters(args))
    await feed.start()
    await feed.follow()
    print(f"corral events tail: following {' '.join(_subjects(args))}", file=sys.stderr, flush=True)
    printed = 0
    try:
        async for record in feed.entries(stop):
            print(tail_line(record), flush=True)
            printed += 1
            if args.count is not None and printed >= args.count:
                break
    finally:
        await feed.close()
    return 0
