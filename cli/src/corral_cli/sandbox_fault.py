"""`corral sandbox fault …`: inject or clear faults in a running sandbox from another shell.

A sandbox started with `corral sandbox up` holds its faults in its own process: the API server's
(latency, 409/429/500 on writes, cut watches, compaction) and the simulated Longhorn's (crash an
engine, fail a replica, stall controllers, node NotReady, slow writes). This sub-command reaches both
through the sandbox's `/_sandbox/` control API, found from the kubeconfig `up` wrote, so an operator
or a chaos script can drive the cluster while corral runs against it:

    corral sandbox fault --kubeconfig run/sandbox/kubeconfig conflicts --rate 0.5
    corral sandbox fault crash-engine pvc-1
    corral sandbox fault kill-v2-im node-2       # v2: block-target N, node-images N --remove I, io
    corral sandbox fault clear

It prints the resulting fault state as JSON and exits 0; 1 when the sandbox refuses or cannot be
reached (the message on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral_cli.sandbox_gate import refuse_without_sandbox

if TYPE_CHECKING:
    from corral_sandbox.control import SandboxControl

Action = Callable[["SandboxControl", argparse.Namespace], Awaitable[Any]]


def register(actions: Any, default_kubeconfig: Path) -> None:
    """Add `fault` under `corral sandbox`."""
    fault = actions.add_parser("fault", help="inject or clear faults in a running sandbox")
    fault.add_argument(
        "--kubeconfig",
        type=Path,
        default=default_kubeconfig,
        help=f"the sandbox's kubeconfig (default {default_kubeconfig})",
    )
    fault.add_argument("--url", help="the sandbox's API URL instead of a kubeconfig")
    kinds = fault.add_subparsers(dest="fault", required=True, metavar="FAULT")

    def add(name: str, action: Action, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = kinds.add_parser(name, help=help)
        parser.set_defaults(func=run_fault, fault_action=action)
        return parser

    add("show", _show, "print every fault held now")
    add("clear", lambda c, a: c.clear(), "every fault off (API server and simulator)")

    latency = add("latency", _latency, "add latency to every API request (or only to writes)")
    latency.add_argument("seconds", type=float)
    latency.add_argument("--writes", action="store_true", help="only writes wait")
    for name, knob, code in (
        ("conflicts", "conflict_rate", "409 Conflict"),
        ("throttle", "throttle_rate", "429 TooManyRequests"),
        ("errors", "error_rate", "500 InternalError"),
    ):
        rate = add(name, _rate(knob), f"answer a share of the writes with {code}")
        rate.add_argument("--rate", type=float, required=True, help="0..1 (0 turns it off)")
        rate.add_argument(
            "--only",
            action="append",
            default=[],
            metavar="PLURAL",
            help="only writes to this resource (repeatable; applies to every write fault; default all)",
        )
        if knob == "throttle_rate":
            rate.add_argument("--retry-after", type=int, help="Retry-After seconds in the answer")
    cut = add("cut-watches", _cut_watches, "end (or silence) every watch after N events or S seconds")
    cut.add_argument("--after-events", type=int)
    cut.add_argument("--after-seconds", type=float)
    cut.add_argument("--silently", action="store_true", help="stop sending but keep the connection open")
    add("compact", lambda c, a: c.compact(), "forget the watch history: older resourceVersions get 410")

    add("crash-engine", lambda c, a: c.crash_engine(a.volume), "kill a volume's engine").add_argument(
        "volume"
    )
    add("fail-replica", lambda c, a: c.fail_replica(a.replica), "a replica's process errors").add_argument(
        "replica"
    )
    stall = add("stall", lambda c, a: c.stall(*a.controllers), "stop simulated controllers (none: all)")
    stall.add_argument("controllers", nargs="*", metavar="CONTROLLER")
    resume = add("resume", lambda c, a: c.resume(*a.controllers), "restart stalled controllers")
    resume.add_argument("controllers", nargs="*", metavar="CONTROLLER")
    add("node-not-ready", lambda c, a: c.set_node_ready(a.node, False), "a node goes NotReady").add_argument(
        "node"
    )
    add("node-ready", lambda c, a: c.set_node_ready(a.node, True), "a node is Ready again").add_argument(
        "node"
    )
    add(
        "slow-writes", lambda c, a: c.slow_writes(a.seconds), "every simulator write waits first"
    ).add_argument("seconds", type=float)
    add("restart-simulator", lambda c, a: c.restart_simulator(), "simulated controllers lose their memory")
    add(
        "restart-im-container",
        lambda c, a: c.restart_instance_manager_container(a.pod),
        "an instance-manager container restarts",
    ).add_argument("pod")
    # SIM-V2 / SIM-IO
    for name, call, text in (
        (
            "block-target",
            "block_target",
            "no v2 engine target can be created on a node (a stalled relocation)",
        ),
        ("unblock-target", "unblock_target", "v2 targets may be created on the node again"),
        ("kill-v2-im", "kill_v2_instance_manager", "a node's v2 instance manager dies and stays down"),
        ("revive-v2-im", "revive_v2_instance_manager", "a node's v2 instance manager may come back"),
    ):
        add(name, _on_node(call), text).add_argument("node")
    images = add("node-images", _node_images, "change the images a kube node reports pulled")
    images.add_argument("node")
    images.add_argument("--add", action="append", default=[], metavar="IMAGE", help="list it (repeatable)")
    images.add_argument("--remove", action="append", default=[], metavar="IMAGE", help="drop it (repeatable)")
    add("io", lambda c, a: c.io(), "print the I/O ledger: per volume its gaps and detaches")


def _on_node(call: str) -> Action:
    def apply(control: SandboxControl, args: argparse.Namespace) -> Awaitable[Any]:
        action: Callable[[str], Awaitable[Any]] = getattr(control, call)
        return action(args.node)

    return apply


def _node_images(control: SandboxControl, args: argparse.Namespace) -> Awaitable[Any]:
    return control.set_node_images(args.node, add=args.add, remove=args.remove)


def _rate(knob: str) -> Action:
    def apply(control: SandboxControl, args: argparse.Namespace) -> Awaitable[Any]:
        changes: dict[str, Any] = {knob: args.rate, "plurals": args.only}
        if getattr(args, "retry_after", None) is not None:
            changes["retry_after_s"] = args.retry_after
        return control.set_faults(**changes)

    return apply


def _latency(control: SandboxControl, args: argparse.Namespace) -> Awaitable[Any]:
    knob = "write_latency_s" if args.writes else "latency_s"
    return control.set_faults(**{knob: args.seconds})


def _cut_watches(control: SandboxControl, args: argparse.Namespace) -> Awaitable[Any]:
    return control.set_faults(
        watch_cut_after_events=args.after_events,
        watch_cut_after_s=args.after_seconds,
        watch_drop_silently=args.silently,
    )


async def _show(control: SandboxControl, args: argparse.Namespace) -> Any:
    return {"api": await control.call("GET", "faults"), "simulator": await control.simulator_faults()}


def run_fault(args: argparse.Namespace) -> int:
    refused = refuse_without_sandbox("sandbox fault")
    if refused is not None:
        return refused
    # imported here: the sandbox is a heavy optional part and other sub-commands must not pay for it
    import aiohttp

    from corral_sandbox.control import SandboxControl

    try:
        control = SandboxControl(args.url) if args.url else SandboxControl.from_kubeconfig(args.kubeconfig)
    except (OSError, ValueError) as error:
        print(f"corral sandbox fault: {error}", file=sys.stderr)
        return 1
    action: Action = args.fault_action
    try:
        result = asyncio.run(_run(control, action, args))
    except (OSError, RuntimeError, aiohttp.ClientError) as error:
        print(f"corral sandbox fault {args.fault}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


async def _run(control: SandboxControl, action: Action, args: argparse.Namespace) -> Any:
    try:
        return await action(control, args)
    finally:
        await control.close()
