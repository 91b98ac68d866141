"""`corral sandbox up`: the sandbox cluster (Kubernetes API emulator + Longhorn simulator, seeded) in
the foreground until Ctrl-C, for `make run`, demos and trying corral's services by hand.

It prints `kubeconfig: <path>` once the seeded cluster is ready (the file appears at that moment,
atomically), `longhorn-manager: <url>` (the manager REST API), then `READY <url>`; SIGINT or SIGTERM
shuts it down cleanly with exit status 0. `corral sandbox fault …` (sandbox_fault.py) injects faults
into it from another shell.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from corral_cli import sandbox_fault
from corral_cli.sandbox_gate import refuse_without_sandbox

DEFAULT_KUBECONFIG = Path("run/sandbox/kubeconfig")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sandbox", help="run the sandbox cluster (emulator + Longhorn simulator)")
    actions = parser.add_subparsers(dest="sandbox_action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start a seeded sandbox cluster and keep it running until Ctrl-C")
    up.add_argument(
        "--seed-file",
        type=Path,
        help="cluster seed YAML, or real longhorn.io/v1beta2 objects as kubectl prints them"
        " (default: the built-in cluster)",
    )
    up.add_argument(
        "--demo",
        action="store_true",
        help="the engine-upgrade demo cluster of `corral run` (seeds/demo.yaml) instead of the default",
    )
    up.add_argument("--nodes", type=int, help="number of nodes (overrides the seed file)")
    up.add_argument("--volumes", type=int, help="number of volumes (overrides the seed file)")
    up.add_argument("--seed", type=int, help="RNG seed of the simulator (overrides the seed file)")
    up.add_argument(
        "--kubeconfig", type=Path, default=DEFAULT_KUBECONFIG, help=f"default {DEFAULT_KUBECONFIG}"
    )
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=0, help="API port (0: any free port)")
    up.add_argument(
        "--advertise-url",
        default="",
        metavar="URL",
        help="the API URL the kubeconfig names, if clients reach the sandbox by another address than"
        " --host (e.g. http://sandbox:6443 from other containers)",
    )
    up.add_argument("--live-upgrade-seconds", type=float, default=10.0, help="duration of one live upgrade")
    up.add_argument(
        "--offline-upgrade-seconds", type=float, default=3.0, help="duration of one offline upgrade"
    )
    up.add_argument("--rebuild-seconds", type=float, default=5.0, help="duration of one replica rebuild")
    up.add_argument(
        "--non-working-image",
        action="append",
        default=[],
        metavar="IMAGE",
        help="an engine image a live upgrade never completes to (repeatable)",
    )
    up.set_defaults(func=run_up)
    sandbox_fault.register(actions, DEFAULT_KUBECONFIG)


def run_up(args: argparse.Namespace) -> int:
    refused = refuse_without_sandbox("sandbox up")
    if refused is not None:
        return refused
    try:
        return _run_up(args)
    except KeyboardInterrupt:
        # Ctrl-C before the cluster was up (the imports alone take seconds): nothing to clean up
        return 0


def _run_up(args: argparse.Namespace) -> int:
    # imported here: the sandbox is a heavy optional part and other sub-commands must not pay for it
    from corral_sandbox.seeds import SeedError, default_seed, demo_seed, load_seed, resized

    try:
        built_in = demo_seed if args.demo else default_seed
        seed = load_seed(args.seed_file) if args.seed_file else built_in()
        seed = resized(seed, nodes=args.nodes, volumes=args.volumes, rng_seed=args.seed)
    except (SeedError, ValueError) as error:
        print(f"corral sandbox up: {error}", file=sys.stderr)
        return 2
    config = seed.sim_config(
        live_upgrade_seconds=args.live_upgrade_seconds,
        offline_upgrade_seconds=args.offline_upgrade_seconds,
        rebuild_seconds=args.rebuild_seconds,
        non_working_images=frozenset(args.non_working_image),
    )
    return asyncio.run(_serve(seed, config, args))


async def _serve(seed: Any, config: Any, args: argparse.Namespace) -> int:
    from corral_sandbox.cluster import SandboxCluster

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        cluster = SandboxCluster(
            seed,
            sim_config=config,
            kubeconfig=args.kubeconfig,
            host=args.host,
            port=args.port,
            advertise_url=args.advertise_url,
        )
        async with cluster:
            volumes = len(cluster.emulator.list("longhorn.io", "volumes", seed.namespace))
            print(f"kubeconfig: {cluster.kubeconfig_path.resolve()}", flush=True)
            # Where an operator's manual engine upgrade goes (`?action=engineUpgrade`), as on Longhorn.
            print(f"longhorn-manager: {cluster.manager_url}", flush=True)
            summary = f"{len(seed.nodes)} nodes, {volumes} volumes, seed {seed.seed}"
            print(f"READY {cluster.url} ({summary}); Ctrl-C stops", flush=True)
            await stop.wait()
            print("stopping", flush=True)
    except OSError as error:
        print(f"corral sandbox up: {error}", file=sys.stderr)
        return 1
    return 0
