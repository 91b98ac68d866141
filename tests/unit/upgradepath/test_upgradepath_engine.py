"""The engine path (longhorn-behaviour.md §2.2 step 4): T2.2 cases and the messages, exactly."""

from __future__ import annotations

import pytest

from corral_model.longhorn import EngineImage, EngineImageStatus, ObjectMeta
from corral_upgradepath.build import EngineAPIVersions
from corral_upgradepath.enginepath import check_engine_path

# Longhorn v1.11.0's engine constants: CLI 11 (min 8), controller 6 (min 4).
SUPPORTED = EngineAPIVersions(
    cli_api_version=11, cli_api_min_version=8, controller_api_version=6, controller_api_min_version=4
)
# T2.2's "target with higher current versions and the same minimum".
HIGHER = EngineAPIVersions(
    cli_api_version=12, cli_api_min_version=8, controller_api_version=7, controller_api_min_version=4
)


def ei(name: str, controller: int, cli: int, ref_count: int = 1) -> EngineImage:
    return EngineImage(
        metadata=ObjectMeta(name=name, namespace="longhorn-system"),
        status=EngineImageStatus(ref_count=ref_count, controller_api_version=controller, cli_api_version=cli),
    )


PREFIX = "failed checking Engine upgrade path: incompatible Engine"

CASES = [
    # T2.2
    ("one engine at the minimums", [ei("ei-a", 4, 8)], SUPPORTED, None),
    (
        "several engines inside a higher target's range",
        [ei("ei-a", 5, 11), ei("ei-b", 6, 9)],
        HIGHER,
        None,
    ),
    (
        "controller below the minimum",
        [ei("ei-a", 3, 8)],
        SUPPORTED,
        f"{PREFIX} ei-a controller API version: found version 3 is below required minimal version 4",
    ),
    (
        "one of several with CLI below the minimum",
        [ei("ei-a", 4, 8), ei("ei-b", 4, 7)],
        SUPPORTED,
        f"{PREFIX} ei-b client API version: found version 7 is below required minimal version 8",
    ),
    (
        "engine above the target (downgrade)",
        [ei("ei-a", 7, 12)],
        SUPPORTED,
        f"{PREFIX} ei-a controller API version: downgrading from 7 to 6 is not supported",
    ),
    ("no engine images", [], SUPPORTED, None),
    # Beyond T2.2
    (
        "CLI above the target",
        [ei("ei-a", 6, 12)],
        SUPPORTED,
        f"{PREFIX} ei-a client API version: downgrading from 12 to 11 is not supported",
    ),
    ("at the current versions", [ei("ei-a", 6, 11)], SUPPORTED, None),
    ("unused ancient image is ignored (UPE-07)", [ei("ei-old", 1, 3, ref_count=0)], SUPPORTED, None),
    (
        "v1.4 engine still in use (T2.3)",
        [ei("ei-v15", 4, 8), ei("ei-v14", 4, 7, ref_count=3)],
        SUPPORTED,
        f"{PREFIX} ei-v14 client API version: found version 7 is below required minimal version 8",
    ),
    (
        "image with no version yet but referenced",
        [ei("ei-new", 0, 0)],
        SUPPORTED,
        f"{PREFIX} ei-new controller API version: found version 0 is below required minimal version 4",
    ),
    (
        "first bad image by name, whatever the input order",
        [ei("ei-z", 3, 8), ei("ei-b", 7, 8), ei("ei-m", 4, 1)],
        SUPPORTED,
        f"{PREFIX} ei-b controller API version: downgrading from 7 to 6 is not supported",
    ),
    (
        "controller checked before CLI on the same image",
        [ei("ei-a", 3, 1)],
        SUPPORTED,
        f"{PREFIX} ei-a controller API version: found version 3 is below required minimal version 4",
    ),
]


@pytest.mark.parametrize(("images", "supported", "expected"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_engine_path(images: list[EngineImage], supported: EngineAPIVersions, expected: str | None) -> None:
    verdict = check_engine_path(images, supported)
    if expected is None:
        assert verdict.allowed, verdict.message
    else:
        assert not verdict.allowed
        assert verdict.message == expected


def test_order_does_not_depend_on_input_order() -> None:
    images = [ei("ei-c", 7, 11), ei("ei-a", 4, 7), ei("ei-b", 3, 8)]
    messages = {check_engine_path(order, SUPPORTED).message for order in (images, images[::-1])}
    assert messages == {
        f"{PREFIX} ei-a client API version: found version 7 is below required minimal version 8"
    }
