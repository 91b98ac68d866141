"""`corral pre-upgrade`: the upgrade-path gate as the Helm chart's pre-upgrade hook Job runs it.

It reads the `current-longhorn-version` Setting and the EngineImages (live and read-only, or from a
`kubectl get settings,engineimages -o json|yaml` snapshot), decides with this build's version, and
exits 0 when the upgrade may proceed, 1 when it is blocked (Helm then aborts the upgrade and the
cluster is untouched), 2 when it cannot decide (bad arguments, unreadable snapshot, API errors).
The version check is always enforced here, as in Longhorn's pre-upgrade job: there is no bypass.

Unlike Longhorn's job it records no Kubernetes Event: in corral only the actuator writes to the
cluster, and this Job runs before any corral service exists. The decision is printed (the Job log)
and carried by the exit code (the Job status Helm reports).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import msgspec

from corral_upgradepath.build import BuildFileError
from corral_upgradepath.cluster import ClusterView
from corral_upgradepath.gate import check_against_build
from corral_upgradepath.live import LiveReadError, read_cluster_view
from corral_upgradepath.snapshot import SnapshotError, parse_snapshot, read_snapshot

EXIT_ALLOWED = 0
EXIT_BLOCKED = 1
EXIT_CANNOT_DECIDE = 2


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "pre-upgrade",
        help="check that upgrading the cluster to this build is a supported path (exit 0/1/2)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for the live read (default $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    source.add_argument(
        "--snapshot", metavar="FILE", help="read a kubectl List (JSON or YAML) instead; `-` reads stdin"
    )
    parser.add_argument(
        "--target-version", metavar="V", help="the version being installed (default: this build's version)"
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or "longhorn-system",
        help="the Longhorn namespace (default $POD_NAMESPACE, else longhorn-system)",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


async def _read_live(kubeconfig: str | None, namespace: str) -> ClusterView:
    # Imported here: the Kubernetes client takes seconds to import, and every `corral` command
    # imports this module to register it.
    import aiohttp
    from kubernetes_asyncio.config import ConfigException

    from corral_kube.client import NoKubeconfig, connected

    try:
        async with connected(kubeconfig) as api:
            return await read_cluster_view(api, namespace)
    except NoKubeconfig as e:
        raise LiveReadError(str(e)) from e
    except (ConfigException, OSError, aiohttp.ClientError, TimeoutError) as e:
        raise LiveReadError(f"{type(e).__name__}: {e}") from e


def _load_view(args: argparse.Namespace) -> ClusterView:
    if args.snapshot == "-":
        try:
            return parse_snapshot(sys.stdin.buffer.read(), namespace=args.namespace)
        except SnapshotError as e:
            raise SnapshotError(f"snapshot on stdin: {e}") from e
    if args.snapshot:
        return read_snapshot(args.snapshot, namespace=args.namespace)
    return asyncio.run(_read_live(args.kubeconfig, args.namespace))


def _fail(message: str) -> int:
    print(f"corral pre-upgrade: error: {message}", file=sys.stderr)
    return EXIT_CANNOT_DECIDE


def run(args: argparse.Namespace) -> int:
    try:
        view = _load_view(args)
        decision = check_against_build(
            view.current_version,
            engine_images=view.engine_images,
            version_check=True,
            target=args.target_version,
        )
    except (SnapshotError, BuildFileError) as e:
        return _fail(str(e))
    except LiveReadError as e:  # cannot decide, and never "allowed"
        return _fail(f"cannot read the cluster: {e}")

    in_use = sum(1 for ei in view.engine_images if ei.status.ref_count != 0)
    if args.output == "json":
        report = {
            "namespace": args.namespace,
            "engineImages": len(view.engine_images),
            "engineImagesInUse": in_use,
            "decision": decision,
        }
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
        sys.stdout.flush()
    else:
        current = decision.current_version or "(none: fresh install)"
        print(
            f"upgrade path check in {args.namespace}: current {current} -> target "
            f"{decision.target_version}; engine images: {len(view.engine_images)}, in use: {in_use}"
        )
        print(decision.summary())
    return EXIT_ALLOWED if decision.allowed else EXIT_BLOCKED
