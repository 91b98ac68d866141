"""The whole gate, `CheckUpgradePath`: bypass flag, then version path, then engine path.

Pure: every input is an argument (the distro too, which Longhorn reads from `LONGHORN_DISTRO`), so
the pre-upgrade command, every service's start-up and the tests decide the same way from the same
facts. Rules: longhorn-behaviour.md §2.2.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from corral_model.longhorn import EngineImage
from corral_upgradepath import gosemver
from corral_upgradepath.build import BuildInfo, EngineAPIVersions, build_info
from corral_upgradepath.decision import REASON_BYPASS, Check, GateDecision, GateWarning
from corral_upgradepath.enginepath import check_engine_path
from corral_upgradepath.versionpath import check_version_path

# The bypass is refused below this version: older clusters predate the gate's own migrations.
BYPASS_FLOOR = "v1.4.0"
DISTRO_ENV = "LONGHORN_DISTRO"


def check_upgrade_path(
    current: str,
    target: str,
    *,
    engine_images: Iterable[EngineImage] = (),
    engine_api: EngineAPIVersions,
    distro: str = "",
    two_minor_distros: tuple[str, ...] = (),
    version_check: bool = True,
) -> GateDecision:
    """Decide whether a build of version `target` may run against a cluster at `current`.

    `current` is the `current-longhorn-version` setting value ("" when it does not exist: a fresh
    install). With `version_check=False` (the bypass) both paths are skipped, downgrades included,
    but only for a cluster at `v1.4.0` or later, and a warning is attached for an Event.
    """

    def decision(allowed: bool, reason: str, check: Check, *warnings: GateWarning) -> GateDecision:
        return GateDecision(
            allowed=allowed,
            current_version=current,
            target_version=target,
            reason=reason,
            check=check,
            warnings=warnings,
        )

    if not version_check and current != "":
        if gosemver.compare(current, BYPASS_FLOOR) < 0:
            return decision(
                False,
                f"failed to skip the upgrade check for {current} to upgrade to {target}, "
                f"as it only supports the current version larger than {BYPASS_FLOOR}",
                Check.BYPASS,
            )
        message = f"It is not recommended to disable the upgrade version check from {current} to {target}"
        return decision(
            True, f"upgrade version check disabled: {message}", Check.BYPASS,
            GateWarning(reason=REASON_BYPASS, message=message),
        )  # fmt: skip

    version = check_version_path(current, target, distro=distro, two_minor_distros=two_minor_distros)
    if not version.allowed:
        return decision(False, version.message, Check.VERSION)
    engine = check_engine_path(engine_images, engine_api)
    if not engine.allowed:
        return decision(False, engine.message, Check.ENGINE)
    return decision(True, f"{version.message}; {engine.message}", Check.ENGINE)


def check_against_build(
    current: str,
    *,
    engine_images: Iterable[EngineImage] = (),
    version_check: bool = True,
    target: str | None = None,
    distro: str | None = None,
    build: BuildInfo | None = None,
) -> GateDecision:
    """`check_upgrade_path` with this build's version, engine API range and distro list.

    `target` overrides the build version (the pre-upgrade command's `--target-version`); `distro`
    defaults to `$LONGHORN_DISTRO`.
    """
    info = build or build_info()
    return check_upgrade_path(
        current,
        info.version if target is None else target,
        engine_images=engine_images,
        engine_api=info.engine_api,
        distro=distro_from_env() if distro is None else distro,
        two_minor_distros=info.two_minor_upgrade_distros,
        version_check=version_check,
    )


def distro_from_env(environ: Mapping[str, str] | None = None) -> str:
    return (os.environ if environ is None else environ).get(DISTRO_ENV, "")
