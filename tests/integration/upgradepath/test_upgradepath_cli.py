"""`corral pre-upgrade --snapshot` on crafted snapshots: exit codes and the printed decision.

Exit 0 = allowed, 1 = blocked (the Helm hook fails and the upgrade stops), 2 = cannot decide.
The build under test is the packaged one (Longhorn v1.11.0, engine CLI 8..11, controller 4..6).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral_cli.main import main
from tests.fixtures.processes import free_port

DATA = Path(__file__).parents[2] / "data" / "upgradepath"


def _unsupported(what: str) -> str:
    return f"blocked: failed to upgrade since {what} is not supported"


CASES = [
    ("allowed-minor-v1.10.2.json", [], 0, "allowed: minor upgrade from v1.10.2 to v1.11.0 is supported"),
    ("fresh-install.json", [], 0, "allowed: fresh install of v1.11.0"),
    ("setting-list-prerelease-v1.11.0-rc2.yaml", [], 0, "allowed: upgrade from v1.11.0-rc2 to v1.11.0"),
    (
        "setting-list-prerelease-v1.11.0-rc2.yaml",
        ["--target-version", "v1.11.0-rc1"],
        1,
        _unsupported("downgrading from v1.11.0-rc2 to v1.11.0-rc1"),
    ),
    (
        "blocked-two-minors-v1.9.3.yaml",
        [],
        1,
        _unsupported("upgrading from v1.9.3 to v1.11.0 for minor version"),
    ),
    (
        "blocked-two-minors-v1.9.3.yaml",
        ["--target-version", "v1.10.0"],
        0,
        "allowed: minor upgrade from v1.9.3 to v1.10.0 is supported",
    ),
    (
        "blocked-downgrade-v1.12.0.json",
        [],
        1,
        _unsupported("downgrading from v1.12.0 to v1.11.0"),
    ),
    (
        "blocked-engine-v1.10.0.yaml",
        [],
        1,
        "blocked: failed checking Engine upgrade path: incompatible Engine ei-7a1d0f42 client API version: "
        "found version 7 is below required minimal version 8",
    ),
    (
        "invalid-master-head.json",
        [],
        1,
        "blocked: failed to parse current master-head major/minor version: "
        'strconv.Atoi: parsing "master-head": invalid syntax',
    ),
    (
        "invalid-v1-no-minor.json",
        [],
        1,
        'blocked: failed to parse current v1 major/minor version: no minor version in "v1"',
    ),
    (
        "allowed-minor-v1.10.2.json",
        ["--target-version", "1.11.0"],
        1,
        "blocked: failed to upgrade since upgrading version 1.11.0 is not valid",
    ),
    (
        "other-namespace.json",
        ["--namespace", "longhorn"],
        1,
        _unsupported("upgrading from v1.9.3 to v1.11.0 for minor version"),
    ),
]


@pytest.mark.parametrize(("snapshot", "extra", "code", "line"), CASES)
def test_snapshot_decisions(
    snapshot: str, extra: list[str], code: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pre-upgrade", "--snapshot", str(DATA / snapshot), *extra]) == code
    out, err = capsys.readouterr()
    header, decision = out.splitlines()
    assert header.startswith("upgrade path check in ")
    assert decision.startswith(line)
    assert err == ""


def test_header_says_what_was_read(capsys: pytest.CaptureFixture[str]) -> None:
    main(["pre-upgrade", "--snapshot", str(DATA / "blocked-engine-v1.10.0.yaml")])
    assert capsys.readouterr().out.splitlines()[0] == (
        "upgrade path check in longhorn-system: current v1.10.0 -> target v1.11.0; "
        "engine images: 2, in use: 2"
    )


def test_no_bypass_and_no_distro_exception_without_a_distro_list(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job always enforces; this build lists no two-minor distro, so LONGHORN_DISTRO changes nothing."""
    monkeypatch.setenv("LONGHORN_DISTRO", "rke2")
    monkeypatch.setenv("CORRAL_UPGRADE_VERSION_CHECK", "false")
    assert main(["pre-upgrade", "--snapshot", str(DATA / "blocked-two-minors-v1.9.3.yaml")]) == 1
    assert "for minor version is not supported" in capsys.readouterr().out


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["pre-upgrade", "--snapshot", str(DATA / "blocked-downgrade-v1.12.0.json"), "--output", "json"])
        == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert report["namespace"] == "longhorn-system"
    assert (report["engineImages"], report["engineImagesInUse"]) == (1, 1)
    assert report["decision"] == {
        "allowed": False,
        "currentVersion": "v1.12.0",
        "targetVersion": "v1.11.0",
        "reason": "failed to upgrade since downgrading from v1.12.0 to v1.11.0 is not supported",
        "check": "version",
        "warnings": [],
    }


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--snapshot", str(DATA / "broken.json")], "broken.json: not JSON or YAML"),
        (["--snapshot", str(DATA / "nope.json")], "cannot read snapshot"),
        (["--snapshot", str(DATA / "other-namespace.json")], "no Setting or EngineImage in namespace"),
        (["--snapshot", str(DATA / "bad-engine-image-field.json")], "item 0 (EngineImage ei-bad)"),
        (["--kubeconfig", str(DATA / "no-such-kubeconfig")], "cannot read the cluster"),
    ],
)
def test_cannot_decide_exits_2(args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pre-upgrade", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("corral pre-upgrade: error: ")
    assert complaint in err


def test_unreachable_api_server_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    assert main(["pre-upgrade", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert (
        "cannot read the cluster: GET /apis/longhorn.io/v1beta2/namespaces/longhorn-system/settings/" in err
    )


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["pre-upgrade", "--snapshot", "a", "--kubeconfig", "b"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("snapshot", "code", "line"),
    [
        (
            "blocked-two-minors-v1.9.3.yaml",
            1,
            _unsupported("upgrading from v1.9.3 to v1.11.0 for minor version"),
        ),
        ("allowed-minor-v1.10.2.json", 0, "allowed: minor upgrade from v1.10.2 to v1.11.0 is supported"),
    ],
)
def test_as_a_separate_process(snapshot: str, code: int, line: str) -> None:
    """What the hook Job runs: a real process, its exit status and its log."""
    env = {k: v for k, v in os.environ.items() if k not in ("LONGHORN_DISTRO", "POD_NAMESPACE")}
    done = subprocess.run(
        [sys.executable, "-m", "corral_cli", "pre-upgrade", "--snapshot", str(DATA / snapshot)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines()[-1].startswith(line)


def test_snapshot_from_stdin() -> None:
    """`kubectl get settings,engineimages -n longhorn-system -o json | corral pre-upgrade --snapshot -`"""
    done = subprocess.run(
        [sys.executable, "-m", "corral_cli", "pre-upgrade", "--snapshot", "-"],
        input=(DATA / "blocked-downgrade-v1.12.0.json").read_bytes(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.decode().splitlines()[-1] == _unsupported("downgrading from v1.12.0 to v1.11.0")
    garbage = subprocess.run(
        [sys.executable, "-m", "corral_cli", "pre-upgrade", "--snapshot", "-"],
        input=b"{not json",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert garbage.returncode == 2
    assert garbage.stderr.decode().startswith(
        "corral pre-upgrade: error: snapshot on stdin: not JSON or YAML"
    )
