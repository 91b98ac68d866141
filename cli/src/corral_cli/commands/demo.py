"""`corral demo engine-upgrade`: start the demo's engine-upgrade wave on a corral that runs
elsewhere, and show it until it is over.

`corral run` shows the wave beside the services it starts itself; where corral runs in containers
(`docker compose --profile sandbox up`) this command does the same from a container of its own:
it waits for the services' /readyz, does what a Longhorn upgrade does (the new EngineImage, then
`default-engine-image`) through the sandbox's API, follows the wave on the bus, prints one summary
line and exits 0 once the wave is over (1 if it never started or did not finish).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from corral_cli.nats_access import add_nats_options
from corral_cli.sandbox_gate import refuse_without_sandbox


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="start the demo wave on a running corral and show it")
    waves = parser.add_subparsers(dest="wave", required=True, metavar="SERVICE")
    sub = waves.add_parser("engine-upgrade", help="bring a new engine image; show the wave per owner node")
    add_nats_options(sub)  # the same URL and credentials as every command that reads the bus
    sub.add_argument("--kubeconfig", required=True, help="the (sandbox) cluster the upgrade is made in")
    sub.add_argument("--namespace", default="longhorn-system", help="Longhorn's namespace")
    sub.add_argument(
        "--ready-url",
        action="append",
        default=[],
        metavar="URL",
        help="a service's /readyz to wait for before the wave starts (repeatable)",
    )
    sub.add_argument("--image", default="", help="the engine image the upgrade brings (default: the demo's)")
    sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # It needs no sandbox code, but it makes a Longhorn upgrade happen wherever it points: it goes
    # with the sandbox, and production's image has neither.
    refused = refuse_without_sandbox("demo")
    if refused is not None:
        return refused
    from corral_bus.auth import CredentialsError
    from corral_cli.demo.show import DEMO_IMAGE, Demo, DemoSettings
    from corral_cli.nats_access import AccessError, NatsAccess, auth_of

    try:
        access = NatsAccess.from_args(args)
        nats_auth = auth_of(access)
    except (AccessError, CredentialsError) as error:
        print(f"corral demo: {error}", file=sys.stderr)
        return 2
    settings = DemoSettings(
        nats_url=access.shown,
        kubeconfig=args.kubeconfig,
        ready_urls=args.ready_url,
        image=args.image or DEMO_IMAGE,
        namespace=args.namespace,
        tty=sys.stdout.isatty(),
        keeps_running=False,
        prefix="corral demo",
        # the `reader` user on a locked-down NATS (--nats-user, CORRAL_NATS_USER, …)
        nats_auth=nats_auth,
    )
    demo = Demo(settings, sys.stdout)
    demo.start()
    try:
        demo.finished.wait()
    except KeyboardInterrupt:
        demo.stop()
        return 0
    return 0 if demo.completed else 1
