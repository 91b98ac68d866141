"""`corral replay <service> BUNDLE`: make a service's decisions again from a recorded bus, and say
where they differ from what the live service did.

The bundle comes from `corral events dump`, or straight from a bus (`--nats URL`, read only): its
history (LH_HISTORY, corral_cli.events.history) from `--since T` to `--until T`, the view as of T
rebuilt from everything the history holds before T; or, on a bus without a history, its streams
(`--from-seq N`: from that LH_OBJECTS sequence). What the history cannot reproduce (a window that
starts before it, objects older than it) and which corral release made the recorded commands when
it is not this one are said before the diff. The service's own `Decider` runs over it on the
recording's clock (corral_decision.replay); the output is the commands it makes, then every
command id compared with the recording (same / changed / missing / extra, each with the bundle
line it came after or was recorded at), and with `--explain KEY` the decision trail of one target:
each line that touched it (its events, commands, results) and the decider's verdict after it. The
output is a function of the bundle alone (no wall-clock time, sorted), so two runs print the same
bytes.

Exit 0: the replay matches the recording; 1: it differs; 2: unreadable input (corrupt lines are
reported by number and skipped, or stop the replay with `--strict`), an unknown service, or a bus
that cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from corral_cli.commands.events import parse_moment
from corral_cli.nats_access import AccessError, NatsAccess, add_nats_options
from corral_decision import decision_services

EXIT_SAME, EXIT_DIFFERENT, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("replay", help="replay a decision service over a recorded bus and diff")
    services = parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name in sorted(decision_services()):
        sub = services.add_parser(name, help=f"replay the {name} service")
        sub.add_argument("bundle", nargs="?", help="bundle from `corral events dump` ('-' reads stdin)")
        # read a live bus instead of a bundle, with the credentials every bus-reading command takes
        add_nats_options(sub, url_default=None)
        sub.add_argument(
            "--from-seq", type=int, default=None, metavar="N", help="with --nats: from LH_OBJECTS seq N"
        )
        sub.add_argument(
            "--since",
            type=parse_moment,
            default=None,
            help="compare the decisions from this time on (ISO-8601, epoch s, or e.g. 2h ago as 2h);"
            " the view as of then is rebuilt from what comes before it",
        )
        sub.add_argument(
            "--until", type=parse_moment, default=None, help="stop at this time (ISO-8601 or epoch s)"
        )
        sub.add_argument(
            "--explain", default=None, metavar="KEY", help="verdicts on one target, e.g. Volume/ns/name"
        )
        sub.add_argument(
            "--debounce",
            type=float,
            default=None,
            metavar="S",
            help="the runner's debounce in recorded time (default: the service's; 0: after every line)",
        )
        sub.add_argument("--strict", action="store_true", help="stop at the first unreadable line")
        sub.add_argument(
            "--namespace", default=None, help="Longhorn's namespace (default: the service's, longhorn-system)"
        )
        sub.set_defaults(func=run)


def _file_lines(path: str) -> Iterator[bytes]:
    if path == "-":
        yield from sys.stdin.buffer
        return
    with Path(path).open("rb") as handle:
        yield from handle


def _bus_lines(args: argparse.Namespace, access: NatsAccess, limits: list[str]) -> list[Any]:
    """The bus's history (or, without one or with --from-seq, its streams) as bundle lines;
    `limits` gets what the history cannot reproduce."""
    from corral_cli.commands.events import with_bus
    from corral_cli.events.history import has_history, read_history
    from corral_cli.events.reader import snapshot
    from corral_cli.events.streams import DEFAULT_SUBJECTS, filters_by_stream
    from corral_decision.bundle import Line, parse_time

    records: list[Any] = []

    async def read(bus: Any, stop: asyncio.Event) -> int:
        if args.from_seq is None and await has_history(bus):
            window = await read_history(bus, since_ns=args.since, until_ns=args.until)
            records.extend(window.entries)
            limits.extend(window.limits())
        else:
            start = {"from_seq": args.from_seq} if args.from_seq is not None else {"since_ns": args.since}
            records.extend(await snapshot(bus, filters_by_stream(DEFAULT_SUBJECTS), **start))
        return 0

    if asyncio.run(with_bus("replay", access, read)) != 0:
        raise OSError(f"cannot read the bus at {access.shown}")
    return [Line(n, record, parse_time(record.time)) for n, record in enumerate(records, start=1)]


def run(args: argparse.Namespace) -> int:
    from corral_decision import decision_service
    from corral_decision.bundle import read_bundle
    from corral_decision.replay import Replay

    prog = f"corral replay {args.service}"
    if (args.bundle is None) == (args.nats is None):
        print(f"{prog}: give a BUNDLE file or --nats URL (one of them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.from_seq is not None and args.nats is None:
        print(f"{prog}: --from-seq reads a live bus: give --nats URL too", file=sys.stderr)
        return EXIT_BAD_INPUT
    replay = Replay(
        decision_service(args.service),
        until_ns=args.until,
        since_ns=args.since,
        explain=args.explain,
        debounce_s=args.debounce,
        strict=args.strict,
        namespace=args.namespace,
    )
    limits: list[str] = []
    try:
        lines: Iterable[Any] = (
            read_bundle(_file_lines(args.bundle))
            if args.bundle is not None
            else _bus_lines(args, NatsAccess.from_args(args), limits)
        )
        replay.report.limits.extend(limits)
        report = replay.feed_all(lines)
    except (OSError, AccessError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = sys.stdout
    try:
        render(report, out, explain=args.explain)
        out.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if report.bad_lines:
        return EXIT_BAD_INPUT
    return EXIT_SAME if report.matches else EXIT_DIFFERENT


def render(report: Any, out: IO[str], *, explain: str | None) -> None:
    from corral_cli.replay_text import report_lines

    for line in report_lines(report, explain=explain):
        out.write(line + "\n")
