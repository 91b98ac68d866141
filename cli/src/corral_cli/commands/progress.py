"""`corral progress engine-upgrade`: the engine-upgrade wave per owner node, live, from the bus.

Works against any corral bus (`--nats URL`): it follows LH_OBJECTS exactly as the engine-upgrade
service does and judges volumes with the service's own rules, so it shows what the service sees,
never something else. Per owner node: the limit, in flight, done, waiting and blocked (with the
reasons `corral plan engine-upgrade --explain` gives), plus a total. On a terminal the table is
redrawn in place; otherwise one line per node whenever its figures change. Exit 0 once every
eligible volume is on the default image (at once if there is no wave), or never with `--follow`;
exit 1 if NATS cannot be reached, holds no LH_OBJECTS stream, or goes away for good.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

DEFAULT_NATS_URL = os.environ.get("CORRAL_NATS_URL", "nats://127.0.0.1:4222")
CONNECT_TIMEOUT_S = 10.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("progress", help="follow a decision service's wave live, from the bus")
    services = parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    sub = services.add_parser("engine-upgrade", help="per owner node: in flight / done / waiting / blocked")
    sub.add_argument("--nats", default=DEFAULT_NATS_URL, help=f"NATS URL (default {DEFAULT_NATS_URL})")
    sub.add_argument("--namespace", default="longhorn-system", help="Longhorn's namespace")
    sub.add_argument("--follow", action="store_true", help="keep following after the wave is over")
    sub.add_argument(
        "--target-image",
        default="",
        metavar="IMAGE",
        help="also wait until IMAGE is the default engine image (a wave about to start)",
    )
    sub.add_argument(
        "--lines",
        action="store_true",
        help="print one line per change even on a terminal (the default when stdout is not one)",
    )
    sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 0


async def _run(args: argparse.Namespace) -> int:
    from nats.errors import Error as NatsError

    from corral_bus import connect
    from corral_cli.progress.follow import follow_wave, summary
    from corral_cli.progress.render import LineView, ProgressView, TerminalView
    from corral_model.subjects import OBJECTS_STREAM

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            bus = await connect(args.nats, "corral-progress", max_reconnect_attempts=-1)
    except (TimeoutError, OSError) as error:
        print(f"corral progress: cannot reach NATS at {args.nats}: {error or 'timed out'}", file=sys.stderr)
        return 1
    try:
        await bus.js.stream_info(OBJECTS_STREAM)
    except NatsError as error:
        await bus.close()
        print(
            f"corral progress: no {OBJECTS_STREAM} stream at {args.nats} ({error}); is it a corral bus?",
            file=sys.stderr,
        )
        return 1
    out = sys.stdout
    view: ProgressView = TerminalView(out) if out.isatty() and not args.lines else LineView(out)
    try:
        report = await follow_wave(
            bus,
            view,
            namespace=args.namespace,
            follow=args.follow,
            target_image=args.target_image,
            stop=stop,
            on_note=lambda text: print(f"corral progress: {text}", file=sys.stderr, flush=True),
        )
    finally:
        await bus.close()
    print(summary(report), flush=True)
    return 1 if report.lost else 0
