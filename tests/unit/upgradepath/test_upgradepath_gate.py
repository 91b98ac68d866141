"""The whole gate: bypass flag (UPE-10), version then engine path, and properties over versions."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from corral_model.longhorn import EngineImage, EngineImageStatus, ObjectMeta
from corral_upgradepath import gosemver
from corral_upgradepath.build import EngineAPIVersions, build_info
from corral_upgradepath.decision import Check
from corral_upgradepath.gate import check_against_build, check_upgrade_path, distro_from_env

API = EngineAPIVersions(
    cli_api_version=11, cli_api_min_version=8, controller_api_version=6, controller_api_min_version=4
)
OLD_ENGINE = EngineImage(
    metadata=ObjectMeta(name="ei-old"),
    status=EngineImageStatus(ref_count=2, controller_api_version=4, cli_api_version=7),
)


@pytest.mark.parametrize(
    ("current", "target", "expected"),
    [
        (
            "v1.3.3",
            "v1.11.0",
            "failed to skip the upgrade check for v1.3.3 to upgrade to v1.11.0, "
            "as it only supports the current version larger than v1.4.0",
        ),
        (
            "v1.4.0-rc1",
            "v1.11.0",
            "failed to skip the upgrade check for v1.4.0-rc1 to upgrade to v1.11.0, "
            "as it only supports the current version larger than v1.4.0",
        ),
        (
            "master-head",
            "v1.11.0",
            "failed to skip the upgrade check for master-head to upgrade to v1.11.0, "
            "as it only supports the current version larger than v1.4.0",
        ),
    ],
)
def test_bypass_refused_below_v1_4_0(current: str, target: str, expected: str) -> None:
    decision = check_upgrade_path(current, target, engine_api=API, version_check=False)
    assert not decision.allowed
    assert decision.check is Check.BYPASS
    assert decision.reason == expected
    assert decision.warnings == ()


@pytest.mark.parametrize(
    ("current", "target"),
    [
        ("v1.4.0", "v1.11.0"),  # the floor itself, and three minors up
        ("v1.12.0", "v1.11.0"),  # downgrades go through too
        ("v1.9.3", "v3.0.0"),
    ],
)
def test_bypass_allows_with_warning(current: str, target: str) -> None:
    decision = check_upgrade_path(
        current, target, engine_images=[OLD_ENGINE], engine_api=API, version_check=False
    )
    assert decision.allowed
    assert decision.check is Check.BYPASS
    message = f"It is not recommended to disable the upgrade version check from {current} to {target}"
    assert [(w.reason, w.message) for w in decision.warnings] == [("Upgrade", message)]


def test_bypass_on_fresh_install_runs_the_checks() -> None:
    """Longhorn only bypasses when a current version exists; a fresh install goes the normal way."""
    decision = check_upgrade_path("", "v1.11.0", engine_api=API, version_check=False)
    assert decision.allowed
    assert decision.check is Check.ENGINE  # both paths ran
    assert decision.warnings == ()


def test_engine_checked_after_version_path() -> None:
    blocked_by_version = check_upgrade_path("v1.8.0", "v1.11.0", engine_images=[OLD_ENGINE], engine_api=API)
    assert blocked_by_version.check is Check.VERSION
    blocked_by_engine = check_upgrade_path("v1.10.2", "v1.11.0", engine_images=[OLD_ENGINE], engine_api=API)
    assert blocked_by_engine.check is Check.ENGINE
    assert blocked_by_engine.reason == (
        "failed checking Engine upgrade path: incompatible Engine ei-old client API version: "
        "found version 7 is below required minimal version 8"
    )
    assert blocked_by_engine.summary() == f"blocked: {blocked_by_engine.reason}"


def test_fresh_install_still_checks_engine_images() -> None:
    """As in Longhorn: C = "" passes the version path, but in-use engine images are still checked."""
    decision = check_upgrade_path("", "v1.11.0", engine_images=[OLD_ENGINE], engine_api=API)
    assert decision.check is Check.ENGINE
    assert not decision.allowed


def test_decision_carries_both_versions() -> None:
    decision = check_upgrade_path("v1.10.1", "v1.11.0", engine_api=API)
    assert (decision.current_version, decision.target_version) == ("v1.10.1", "v1.11.0")
    assert decision.summary().startswith("allowed: ")


def test_check_against_build_uses_build_metadata() -> None:
    info = build_info()
    decision = check_against_build("v1.10.0", distro="")
    assert decision.target_version == info.version
    assert decision.allowed
    override = check_against_build("v1.10.0", target="v1.12.0", distro="")
    assert override.target_version == "v1.12.0"
    assert not override.allowed


def test_check_against_build_reads_distro_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    info = build_info().__class__(version="v1.11.0", engine_api=API, two_minor_upgrade_distros=("rke2",))
    monkeypatch.setenv("LONGHORN_DISTRO", " RKE2 ")
    assert distro_from_env() == " RKE2 "
    assert check_against_build("v1.9.0", build=info).allowed
    monkeypatch.delenv("LONGHORN_DISTRO")
    assert not check_against_build("v1.9.0", build=info).allowed


# --- properties -------------------------------------------------------------------------------

_num = st.integers(min_value=0, max_value=40)
_pre = st.sampled_from(["", "-dev", "-rc1", "-rc2", "-rc10", "-rc.1", "-0", "-alpha.beta"])
_version = st.builds(lambda a, b, c, p: f"v{a}.{b}.{c}{p}", st.integers(0, 3), _num, _num, _pre)


@given(_version)
def test_same_version_is_always_allowed(version: str) -> None:
    assert check_upgrade_path(version, version, engine_api=API).allowed


@given(_version, _version)
def test_a_downgrade_is_always_blocked(current: str, target: str) -> None:
    assume(gosemver.compare(current, target) > 0)
    decision = check_upgrade_path(current, target, engine_api=API)
    assert not decision.allowed
    assert decision.check is Check.VERSION


@given(_version, _version, st.sampled_from(["", "rke2", "k3s"]))
def test_allowed_means_at_most_one_minor_or_a_supported_major(current: str, target: str, distro: str) -> None:
    decision = check_upgrade_path(current, target, engine_api=API, distro=distro, two_minor_distros=("rke2",))
    if not decision.allowed:
        return
    cur, tgt = gosemver.parse(current), gosemver.parse(target)
    assert cur is not None and tgt is not None
    assert gosemver.compare(current, target) <= 0
    if cur.major == tgt.major:
        assert tgt.minor - cur.minor <= (2 if distro == "rke2" else 1)
    else:
        assert tgt.major == cur.major + 1 and cur.minor >= 30


@given(_version, _version)
def test_bypass_allows_everything_from_v1_4_0(current: str, target: str) -> None:
    decision = check_upgrade_path(
        current, target, engine_images=[OLD_ENGINE], engine_api=API, version_check=False
    )
    assert decision.allowed == (gosemver.compare(current, "v1.4.0") >= 0)


@given(st.text(max_size=12), _version)
def test_arbitrary_current_values_never_crash(current: str, target: str) -> None:
    decision = check_upgrade_path(current, target, engine_api=API)
    assert decision.reason
    if current and not gosemver.is_valid(current):
        assert not decision.allowed
