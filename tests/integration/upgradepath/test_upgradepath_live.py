"""`corral pre-upgrade --kubeconfig` against the sandbox's API emulator, over real HTTP.

The hook Job's promise is that a blocked upgrade changes nothing: the emulator's global
resourceVersion and its write log show that no object was written, whatever the decision. The live
reader must also see the cluster exactly as a snapshot of it does, so every crafted snapshot is
loaded into the emulator and both modes must print the same decision. Refusals and garbage from
an API server (a small aiohttp server here, since the emulator has no RBAC) must exit 2.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from kubernetes_asyncio import client

from corral_cli.main import main
from corral_sandbox.emulator import Emulator

DATA = Path(__file__).parents[2] / "data" / "upgradepath"
NS = "longhorn-system"
GROUP = "longhorn.io"


def _items(snapshot: str) -> dict[str, list[dict[str, Any]]]:
    raw = (DATA / snapshot).read_bytes()
    document = msgspec.json.decode(raw) if snapshot.endswith(".json") else msgspec.yaml.decode(raw)
    default_kind = document["kind"].removesuffix("List")
    by_plural: dict[str, list[dict[str, Any]]] = {"settings": [], "engineimages": []}
    for item in document["items"]:
        kind = item.get("kind", default_kind)
        item = {**item, "kind": kind, "apiVersion": "longhorn.io/v1beta2"}
        by_plural["settings" if kind == "Setting" else "engineimages"].append(item)
    return by_plural


def _seed(emulator: Emulator, snapshot: str) -> None:
    for plural, objects in _items(snapshot).items():
        emulator.load(GROUP, plural, objects)


def _state(emulator: Emulator) -> dict[str, Any]:
    """Everything a write would move: the global resourceVersion, the write count, every object."""
    return {
        "resourceVersion": emulator.resource_version,
        "writes": emulator.write_log.total,
        "objects": {
            plural: {o["metadata"]["name"]: o for o in emulator.list(GROUP, plural, NS)}
            for plural in ("settings", "engineimages")
        },
        "events": emulator.list("", "events", NS),
    }


async def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    # The command runs its own event loop (asyncio.run), so it gets a thread; the emulator keeps
    # serving on this test's loop meanwhile.
    code = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("snapshot", "code"),
    [
        ("blocked-two-minors-v1.9.3.yaml", 1),
        ("blocked-downgrade-v1.12.0.json", 1),
        ("blocked-engine-v1.10.0.yaml", 1),
        ("invalid-master-head.json", 1),
        ("allowed-minor-v1.10.2.json", 0),
        ("fresh-install.json", 0),
        ("setting-list-prerelease-v1.11.0-rc2.yaml", 0),
    ],
)
async def test_live_read_matches_snapshot_and_writes_nothing(
    emulator: Emulator, snapshot: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(emulator, snapshot)
    before = _state(emulator)

    live = await _run(["pre-upgrade", "--kubeconfig", str(emulator.kubeconfig_path)], capsys)
    assert live[0] == code, live[2]
    assert live[2] == ""

    assert _state(emulator) == before  # no resourceVersion moved, no write, no Event

    offline = await _run(["pre-upgrade", "--snapshot", str(DATA / snapshot)], capsys)
    assert offline == live


async def test_blocked_live_upgrade_names_the_reason(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(emulator, "blocked-engine-v1.10.0.yaml")
    code, out, _ = await _run(
        ["pre-upgrade", "--kubeconfig", str(emulator.kubeconfig_path), "--namespace", NS], capsys
    )
    assert code == 1
    assert out.splitlines() == [
        "upgrade path check in longhorn-system: current v1.10.0 -> target v1.11.0; "
        "engine images: 2, in use: 2",
        "blocked: failed checking Engine upgrade path: incompatible Engine ei-7a1d0f42 client API version: "
        "found version 7 is below required minimal version 8",
    ]


async def test_other_namespace_reads_as_fresh_install(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live, a namespace without Longhorn really is a fresh install (the API says 404)."""
    _seed(emulator, "blocked-two-minors-v1.9.3.yaml")
    code, out, _ = await _run(
        ["pre-upgrade", "--kubeconfig", str(emulator.kubeconfig_path), "--namespace", "default"], capsys
    )
    assert code == 0
    assert out.splitlines()[-1] == "allowed: fresh install of v1.11.0; no engine image is in use"


async def test_the_state_probe_sees_a_write(emulator: Emulator, kube_api: client.ApiClient) -> None:
    """Control for the tests above: one Event created through the API changes every part of it."""
    _seed(emulator, "blocked-two-minors-v1.9.3.yaml")
    before = _state(emulator)
    event: Any = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "probe", "namespace": NS},
        "involvedObject": {"kind": "Setting", "name": "current-longhorn-version", "namespace": NS},
        "reason": "Probe",
        "message": "probe",
        "type": "Normal",
    }
    await client.CoreV1Api(kube_api).create_namespaced_event(NS, event)
    after = _state(emulator)
    assert after["resourceVersion"] > before["resourceVersion"]
    assert after["writes"] == before["writes"] + 1
    assert [e["metadata"]["name"] for e in after["events"]] == ["probe"]


@pytest.mark.parametrize(
    ("setting_status", "setting_body", "list_status", "complaint"),
    [
        (
            403,
            b'{"kind": "Status", "message": "settings.longhorn.io is forbidden", "code": 403}',
            200,
            "GET /apis/longhorn.io/v1beta2/namespaces/longhorn-system/settings/current-longhorn-version: "
            "HTTP 403: ",
        ),
        (200, b'{"metadata": {"name": "current-longhorn-version"}, "value": 7}', 200, "undecodable Setting"),
        (
            200,
            b'{"metadata": {"name": "current-longhorn-version"}, "value": "v1.10.0"}',
            500,
            "LIST /apis/longhorn.io/v1beta2/namespaces/longhorn-system/engineimages: HTTP 500: boom",
        ),
    ],
)
async def test_api_errors_mean_cannot_decide(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setting_status: int,
    setting_body: bytes,
    list_status: int,
    complaint: str,
) -> None:
    """Refusals and garbage from the API server exit 2: never 'allowed', never 'blocked'."""

    async def handle(request: web.Request) -> web.Response:
        if request.path.endswith("/settings/current-longhorn-version"):
            return web.Response(status=setting_status, body=setting_body, content_type="application/json")
        if request.path.endswith("/engineimages"):
            body = b'{"items": []}' if list_status == 200 else b"boom"
            return web.Response(status=list_status, body=body, content_type="application/json")
        return web.Response(status=404)

    runner = web.AppRunner(web.Application())
    runner.app.router.add_route("GET", "/{tail:.*}", handle)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            msgspec.json.encode(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            ).decode()
        )
        code, out, err = await _run(["pre-upgrade", "--kubeconfig", str(kubeconfig)], capsys)
    finally:
        await runner.cleanup()
    assert code == 2
    assert out == ""
    assert complaint in err


async def test_without_kubeconfig_it_reads_the_usual_one(
    emulator: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an operator's desk: no --kubeconfig, no $KUBECONFIG, not in a pod: ~/.kube/config, as kubectl."""
    _seed(emulator, "blocked-engine-v1.10.0.yaml")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    shutil.copyfile(str(emulator.kubeconfig_path), home / ".kube" / "config")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, out, err = await _run(["pre-upgrade", "--namespace", NS], capsys)
    assert code == 1, err
    assert out.splitlines()[-1].startswith("blocked: failed checking Engine upgrade path")

    (home / ".kube" / "config").unlink()  # nothing at all: said plainly
    code, out, err = await _run(["pre-upgrade", "--namespace", NS], capsys)
    assert code == 2
    assert "no cluster to talk to" in err and "~/.kube/config" in err, err
