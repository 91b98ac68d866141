"""`corral engine-upgrade resume`: the one action that resumes a wave the wave guard paused; and
`corral engine-upgrade rollback <volume>`: the operator's approval to roll a stuck volume back.

The engine-upgrade service pauses a wave whose volumes fail or get stuck on the new image and writes
why on the default EngineImage (`engine-upgrade.corral.io/wave-paused: "<id>: <reason>"`,
corral_engine_upgrade.wave_guard). Resuming is the operator's decision, so it is written with the
operator's own credentials (as `kubectl annotate` would), never through corral's actuator: this
command reads the default engine image's pause and sets `engine-upgrade.corral.io/wave-resumed` to
its id. The same by hand:

    kubectl -n longhorn-system annotate engineimage <ei-name> \\
        engine-upgrade.corral.io/wave-resumed=<id> --overwrite

The failures counted so far are then acknowledged; the wave pauses again if as many new ones come.

A volume whose upgrade got stuck while its old image is still deployed can go back to the image it
runs (corral_engine_upgrade.rollback); by default engine-upgrade waits for the operator to approve
it (CORRAL_STUCK_ROLLBACK=approved). `rollback` writes that approval, again with the operator's own
credentials: `engine-upgrade.corral.io/rollback-approved` on the Volume, naming the image its
upgrade is stuck on (tested against the resourceVersion read, so an upgrade that ended or moved
meanwhile is not approved). The same by hand:

    kubectl -n longhorn-system annotate volume <volume> \\
        engine-upgrade.corral.io/rollback-approved=<its spec.image> --overwrite

engine-upgrade then sets spec.image back to status.currentImage and holds the volume off that image
while it is the default (`engine-upgrade.corral.io/rolled-back`; remove it to let the volume go).
Exit status: 0 done (or nothing to do), 2 the cluster could not be read or written.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any

from corral_engine_upgrade.records import ROLLBACK_APPROVED, WAVE_PAUSED, WAVE_RESUMED
from corral_model import longhorn as lh
from corral_model.kinds import KINDS

DEFAULT_IMAGE_SETTING = "default-engine-image"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "engine-upgrade", help="act on the engine-upgrade wave (resume a pause, approve a rollback)"
    )
    actions = parser.add_subparsers(dest="engine_upgrade_action", required=True, metavar="ACTION")
    resume = _action(actions, "resume", "resume a wave the wave guard paused")
    resume.add_argument("--dry-run", action="store_true", help="say what would be resumed, write nothing")
    resume.set_defaults(func=run)
    rollback = _action(actions, "rollback", "approve rolling a stuck volume back to the image it runs")
    rollback.add_argument("volume", help="the Volume's name")
    rollback.add_argument("--dry-run", action="store_true", help="say what would be approved, write nothing")
    rollback.set_defaults(func=run_rollback)


def _action(actions: Any, name: str, help_: str) -> argparse.ArgumentParser:
    """An `engine-upgrade` action with the options they share: where the cluster is."""
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=help_, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="default $KUBECONFIG, in-cluster, ~/.kube/config"
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or "longhorn-system",
        help="the Longhorn namespace (default $POD_NAMESPACE, else longhorn-system)",
    )
    return parser


def pause_of(engine_image: Mapping[str, Any]) -> tuple[str, str]:
    """(pause id, reason) of the pause an EngineImage document carries that nobody resumed; ("", "")
    when there is none."""
    annotations = engine_image.get("metadata", {}).get("annotations") or {}
    paused = str(annotations.get(WAVE_PAUSED, ""))
    pause_id = paused.split(":", 1)[0] if paused else ""
    if not pause_id or annotations.get(WAVE_RESUMED) == pause_id:
        return "", ""
    return pause_id, paused


def resume_patch(pause_id: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {WAVE_RESUMED: pause_id}}}


async def resume(kubeconfig: str | None, namespace: str, dry_run: bool = False) -> int:
    """Resume the default engine image's paused wave; the exit status."""
    # Imported here: the Kubernetes client takes seconds to import, and every `corral` command
    # imports this module to register it.
    from kubernetes_asyncio.client import CustomObjectsApi

    from corral_kube.client import connected

    setting, engine_image = KINDS["setting"], KINDS["engineimage"]
    async with connected(kubeconfig) as api:
        custom = CustomObjectsApi(api)
        default = await custom.get_namespaced_custom_object(
            setting.group, setting.version, namespace, setting.plural, DEFAULT_IMAGE_SETTING
        )
        image = str(default.get("value", ""))
        if not image:
            print("corral engine-upgrade resume: no default engine image: nothing to resume")
            return 0
        name = lh.engine_image_name(image)
        ei = await custom.get_namespaced_custom_object(
            engine_image.group, engine_image.version, namespace, engine_image.plural, name
        )
        pause_id, reason = pause_of(ei)
        if not pause_id:
            print(f"the wave to {image} is not paused (EngineImage {name}): nothing to resume")
            return 0
        print(f"paused: {reason}")
        if dry_run:
            print(f"would set {WAVE_RESUMED}={pause_id} on EngineImage {name} (--dry-run)")
            return 0
        await custom.patch_namespaced_custom_object(
            engine_image.group,
            engine_image.version,
            namespace,
            engine_image.plural,
            name,
            resume_patch(pause_id),
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]  # as kubectl annotate
        )
        print(f"resumed: {WAVE_RESUMED}={pause_id} on EngineImage {name}")
        return 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(resume(args.kubeconfig, args.namespace, args.dry_run))
    except Exception as e:  # an API or configuration error: say it, never a traceback
        print(f"corral engine-upgrade resume: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def stuck_images(volume: Mapping[str, Any]) -> tuple[str, str]:
    """(the image a Volume document's upgrade is moving to, the image it runs) while one is under
    way; ("", "") when none is (nothing to roll back)."""
    spec_image = str((volume.get("spec") or {}).get("image") or "")
    current = str((volume.get("status") or {}).get("currentImage") or "")
    return (spec_image, current) if spec_image and current and spec_image != current else ("", "")


def approve_patch(image: str, resource_version: str) -> dict[str, Any]:
    """The approval of rolling back the upgrade to `image`, on the version read (a 409 otherwise)."""
    return {"metadata": {"resourceVersion": resource_version, "annotations": {ROLLBACK_APPROVED: image}}}


async def approve_rollback(kubeconfig: str | None, namespace: str, name: str, dry_run: bool = False) -> int:
    """Approve rolling back the upgrade under way on Volume `name`; the exit status."""
    from kubernetes_asyncio.client import CustomObjectsApi

    from corral_kube.client import connected

    kind = KINDS["volume"]
    async with connected(kubeconfig) as api:
        custom = CustomObjectsApi(api)
        volume = await custom.get_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name
        )
        stuck, runs = stuck_images(volume)
        if not stuck:
            print(f"volume {namespace}/{name} has no engine upgrade under way: nothing to roll back")
            return 0
        what = f"volume {namespace}/{name}: spec.image {stuck} -> {runs} (the image it runs)"
        if dry_run:
            print(f"would approve the rollback of {what} (--dry-run)")
            return 0
        patch = approve_patch(stuck, str(volume["metadata"].get("resourceVersion", "")))
        await custom.patch_namespaced_custom_object(
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            patch,
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]  # as kubectl annotate
        )
        print(f"approved the rollback of {what}: {ROLLBACK_APPROVED}={stuck}")
        print("engine-upgrade rolls it back once it names it stuck, while its old image is deployed")
        return 0


def run_rollback(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(approve_rollback(args.kubeconfig, args.namespace, args.volume, args.dry_run))
    except Exception as e:  # an API or configuration error: say it, never a traceback
        print(f"corral engine-upgrade rollback: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
