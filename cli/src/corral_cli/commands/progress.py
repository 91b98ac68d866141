"""`corral progress engine-upgrade` / `im-restart` / `setting-sync`: a decision service's wave live,
from the bus.

`im-restart`: per node, the instance managers synced (done), restarting (in flight), due now
(waiting) and held (blocked: busy, hugepage-capacity…), then one line per IM that is not synced:
its node, busy instances, the settings its pod lags and since when. Exit 0 once none is restarting
or due (never with `--follow`).

`setting-sync`: each pending danger-zone setting, what blocks it, and which components are still on
the old value (exit 0 once every one is applied).


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
import contextlib
import os
import signal
import sys
from typing import Any

from corral_cli.nats_access import AccessError, NatsAccess, add_nats_options, open_reader

CONNECT_TIMEOUT_S = 10.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("progress", help="follow a decision service's wave live, from the bus")
    services = parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    sub = services.add_parser("engine-upgrade", help="per owner node: in flight / done / waiting / blocked")
    add_nats_options(sub)  # a URL, a read-only user's credentials, or a port-forward
    sub.add_argument("--namespace", default="longhorn-system", help="Longhorn's namespace")
    sub.add_argument("--follow", action="store_true", help="keep following after the wave is over")
    sub.add_argument(
        "--target-image",
        default="",
        metavar="IMAGE",
        help="also wait until IMAGE is the default engine image (a wave about to start)",
    )
    sub.add_argument(
        "--limit",
        type=int,
        default=_env_limit(),
        metavar="N",
        help="corral's own per-node limit, for a service running beside longhorn-manager (modes act,"
        " auto, observe: CORRAL_PER_NODE_LIMIT); default: Longhorn's setting, as in mode replace",
    )
    sub.add_argument(
        "--lines",
        action="store_true",
        help="print one line per change even on a terminal (the default when stdout is not one)",
    )
    sub.set_defaults(func=run)
    for name, about, done in SERVICE_VIEWS:
        view = services.add_parser(name, help=about)
        add_nats_options(view)
        view.add_argument("--namespace", default="longhorn-system", help="Longhorn's namespace")
        view.add_argument("--follow", action="store_true", help=f"keep following once {done}")
        view.add_argument("--lines", action="store_true", help="one line per change even on a terminal")
        view.set_defaults(func=run, target_image="")


# The services whose view needs no option of its own: (name, what it shows, when it is over).
SERVICE_VIEWS = (
    (
        "im-restart",
        "per node and per instance manager: busy instances, unsynced settings, since when",
        "nothing is due",
    ),
    (
        "setting-sync",
        "per pending danger-zone setting: what blocks it and the components on the old value",
        "every setting is applied",
    ),
    (
        "v2-upgrade",
        "per node: its volumes done / in flight / waiting / blocked, and the step's time so far",
        "every node is upgraded",
    ),
)


def _env_limit() -> int | None:
    value = os.environ.get("CORRAL_PER_NODE_LIMIT", "")
    return int(value) if value.strip().isdigit() else None


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 0


async def _run(args: argparse.Namespace) -> int:
    from nats.errors import Error as NatsError

    from corral_cli.progress.follow import follow_wave, summary
    from corral_cli.progress.render import LineView, ProgressView, TerminalView
    from corral_model.subjects import OBJECTS_STREAM

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        try:
            access = NatsAccess.from_args(args)
            bus, url = await open_reader(stack, access, "corral-progress", CONNECT_TIMEOUT_S)
        except AccessError as error:
            print(f"corral progress: {error}", file=sys.stderr)
            return 1
        try:
            await bus.js.stream_info(OBJECTS_STREAM)
        except NatsError as error:
            print(
                f"corral progress: no {OBJECTS_STREAM} stream at {url} ({error}); is it a corral bus?",
                file=sys.stderr,
            )
            return 1
        out = sys.stdout
        view: ProgressView = TerminalView(out) if out.isatty() and not args.lines else LineView(out)
        report = await follow_wave(
            bus,
            view,
            namespace=args.namespace,
            follow=args.follow,
            target_image=args.target_image,
            stop=stop,
            service_name=args.service,
            on_note=lambda text: print(f"corral progress: {text}", file=sys.stderr, flush=True),
            limit=getattr(args, "limit", None),  # engine-upgrade's only
        )
    print(summary(report), flush=True)
    return 1 if report.lost else 0
