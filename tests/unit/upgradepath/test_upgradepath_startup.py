"""The start-up gate: decision from the bus view, Event commands for the actuator, view readiness."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_model.codec import decode, encode
from corral_model.envelopes import Command, EventType, ObjectEvent, Verb
from corral_model.longhorn import EngineImage, EngineImageStatus, ObjectMeta, Setting
from corral_upgradepath.build import BuildInfo, EngineAPIVersions
from corral_upgradepath.cluster import ClusterView
from corral_upgradepath.startup import (
    StartupView,
    gate_event_commands,
    startup_decision,
    version_check_from_env,
)

NS = "longhorn-system"
NOW = 1_790_000_000.0  # 2026-09-21T…Z
BUILD = BuildInfo(
    version="v1.11.0",
    engine_api=EngineAPIVersions(
        cli_api_version=11, cli_api_min_version=8, controller_api_version=6, controller_api_min_version=4
    ),
)


def version_setting(value: str, uid: str = "uid-setting") -> Setting:
    return Setting(metadata=ObjectMeta(name="current-longhorn-version", namespace=NS, uid=uid), value=value)


def view(value: str | None, *images: EngineImage) -> ClusterView:
    return ClusterView(
        version_setting=None if value is None else version_setting(value), engine_images=images
    )


def test_startup_decision_uses_the_view() -> None:
    assert startup_decision(view("v1.10.3"), build=BUILD, distro="").allowed
    assert startup_decision(view(None), build=BUILD, distro="").allowed
    blocked = startup_decision(view("v1.9.0"), build=BUILD, distro="")
    assert blocked.reason == (
        "failed to upgrade since upgrading from v1.9.0 to v1.11.0 for minor version is not supported"
    )
    bypassed = startup_decision(view("v1.9.0"), build=BUILD, distro="", version_check=False)
    assert bypassed.allowed and len(bypassed.warnings) == 1


def _events(commands: tuple[Command, ...]) -> list[tuple[str, str, str]]:
    return [(c.body["type"], c.body["reason"], c.body["message"]) for c in commands if c.body]


def test_blocked_decision_asks_for_one_warning_event() -> None:
    decision = startup_decision(view("v1.9.0"), build=BUILD, distro="")
    (command,) = gate_event_commands(
        decision, service="engine-upgrade", namespace=NS, now=NOW, setting_uid="u1"
    )
    assert command.verb is Verb.CREATE
    assert command.service == "upgrade-gate"  # unfenced, under a name of its own
    assert command.body is not None and command.body["source"] == {"component": "corral-engine-upgrade"}
    assert (command.target.kind, command.target.namespace) == ("Event", NS)
    assert command.created_at == NOW
    assert command.reason == f"upgrade gate: blocked: {decision.reason}"
    body = command.body
    assert body is not None
    assert body["apiVersion"] == "v1" and body["kind"] == "Event"
    assert body["metadata"] == {"name": command.target.name, "namespace": NS}
    assert command.target.name.startswith("current-longhorn-version.")
    assert body["involvedObject"] == {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Setting",
        "namespace": NS,
        "name": "current-longhorn-version",
        "uid": "u1",
    }
    assert (body["type"], body["reason"], body["message"]) == (
        "Warning",
        "FailedUpgradePreCheck",
        decision.reason,
    )
    assert body["source"] == {"component": "corral-engine-upgrade"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-09-21T14:13:20Z"
    assert body["count"] == 1


def test_allowed_decision_asks_for_one_normal_event() -> None:
    decision = startup_decision(view("v1.10.3"), build=BUILD, distro="")
    commands = gate_event_commands(decision, service="watcher", namespace=NS, now=NOW)
    assert _events(commands) == [("Normal", "PassedUpgradeCheck", "pre-upgrade check passed")]
    assert commands[0].body is not None
    assert "uid" not in commands[0].body["involvedObject"]


def test_bypass_asks_for_the_warning_then_the_outcome() -> None:
    decision = startup_decision(view("v1.9.0"), build=BUILD, distro="", version_check=False)
    commands = gate_event_commands(decision, service="watcher", namespace=NS, now=NOW)
    assert _events(commands) == [
        (
            "Warning",
            "Upgrade",
            "It is not recommended to disable the upgrade version check from v1.9.0 to v1.11.0",
        ),
        ("Normal", "PassedUpgradeCheck", "pre-upgrade check passed"),
    ]
    assert len({c.id for c in commands}) == 2


def test_commands_are_deterministic() -> None:
    decision = startup_decision(view("v1.9.0"), build=BUILD, distro="")
    first = gate_event_commands(decision, service="im-restart", namespace=NS, now=NOW)
    again = gate_event_commands(decision, service="im-restart", namespace=NS, now=NOW + 60)
    assert [c.id for c in first] == [c.id for c in again]  # a crash loop republishes the same id
    assert [c.target.name for c in first] == [c.target.name for c in again]
    other_service = gate_event_commands(decision, service="setting-sync", namespace=NS, now=NOW)
    other_decision = gate_event_commands(
        startup_decision(view("v1.8.0"), build=BUILD, distro=""), service="im-restart", namespace=NS, now=NOW
    )
    names = {c.target.name for c in (*first, *other_service, *other_decision)}
    assert len(names) == 3


def test_commands_survive_the_bus_codec() -> None:
    decision = startup_decision(view("v1.9.0"), build=BUILD, distro="")
    for command in gate_event_commands(decision, service="watcher", namespace=NS, now=NOW):
        assert decode(encode(command), Command) == command


def test_long_reason_is_cut_to_the_event_limit() -> None:
    decision = startup_decision(view("v1.9.0-" + "x" * 2000), build=BUILD, distro="")
    (command,) = gate_event_commands(decision, service="watcher", namespace=NS, now=NOW)
    assert command.body is not None
    assert len(command.body["message"]) == 1024


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, True),
        ({"CORRAL_UPGRADE_VERSION_CHECK": " False "}, False),
        ({"CORRAL_UPGRADE_VERSION_CHECK": "1"}, True),
    ],
)
def test_version_check_from_env(environ: dict[str, str], expected: bool) -> None:
    assert version_check_from_env(environ) is expected


def test_version_check_from_env_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="CORRAL_UPGRADE_VERSION_CHECK='maybe': expected true or false"):
        version_check_from_env({"CORRAL_UPGRADE_VERSION_CHECK": "maybe"})


# --- StartupView -------------------------------------------------------------------------------


def ev(type_: EventType, kind: str, name: str, obj: Any = None, namespace: str = NS) -> ObjectEvent[Any]:
    return ObjectEvent(type=type_, kind=kind, namespace=namespace, name=name, object=obj)


def engine_image(name: str, cli: int, ref_count: int = 1) -> EngineImage:
    return EngineImage(
        metadata=ObjectMeta(name=name, namespace=NS),
        status=EngineImageStatus(ref_count=ref_count, cli_api_version=cli, controller_api_version=5),
    )


def test_view_is_ready_only_after_both_resyncs() -> None:
    collector = StartupView(NS)
    collector.apply(ev(EventType.ADDED, "setting", "current-longhorn-version", version_setting("v1.9.0")))
    collector.apply(ev(EventType.RESYNCED, "setting", ""))
    assert not collector.ready  # deciding now would miss an old engine image
    collector.apply(ev(EventType.ADDED, "engineimage", "ei-b", engine_image("ei-b", 10)))
    collector.apply(ev(EventType.RESYNCED, "engineimage", ""))
    assert collector.ready
    assert collector.view().current_version == "v1.9.0"


def test_view_follows_changes_and_ignores_the_rest() -> None:
    collector = StartupView(NS)
    raw_setting = msgspec.to_builtins(version_setting("v1.10.0"))  # ObjectEvent[Any] carries dicts
    collector.apply(ev(EventType.ADDED, "Setting", "current-longhorn-version", raw_setting))
    collector.apply(ev(EventType.ADDED, "setting", "default-engine-image", {"metadata": {"name": "x"}}))
    collector.apply(ev(EventType.ADDED, "volume", "vol-1", {"metadata": {"name": "vol-1"}}))
    collector.apply(ev(EventType.ADDED, "engineimage", "ei-c", engine_image("ei-c", 10)))
    collector.apply(ev(EventType.ADDED, "engineimage", "ei-a", msgspec.to_builtins(engine_image("ei-a", 7))))
    collector.apply(
        ev(EventType.ADDED, "engineimage", "ei-z", engine_image("ei-z", 1), namespace="elsewhere")
    )
    snapshot = collector.view()
    assert snapshot.current_version == "v1.10.0"
    assert [e.metadata.name for e in snapshot.engine_images] == ["ei-a", "ei-c"]
    assert not startup_decision(snapshot, build=BUILD, distro="").allowed  # ei-a speaks CLI 7

    collector.apply(ev(EventType.DELETED, "engineimage", "ei-a", engine_image("ei-a", 7)))
    collector.apply(ev(EventType.MODIFIED, "setting", "current-longhorn-version", version_setting("v1.10.4")))
    snapshot = collector.view()
    assert [e.metadata.name for e in snapshot.engine_images] == ["ei-c"]
    assert startup_decision(snapshot, build=BUILD, distro="").allowed
    collector.apply(ev(EventType.DELETED, "setting", "current-longhorn-version", version_setting("v1.10.4")))
    assert collector.view().version_setting is None


def test_undecodable_version_setting_is_an_error_not_a_fresh_install() -> None:
    collector = StartupView(NS)
    with pytest.raises(ValueError, match="Expected `str`"):
        collector.apply(
            ev(
                EventType.ADDED,
                "setting",
                "current-longhorn-version",
                {"metadata": {"name": "x"}, "value": 5},
            )
        )
    with pytest.raises(ValueError, match="carries no object"):
        collector.apply(ev(EventType.MODIFIED, "setting", "current-longhorn-version", None))


def test_unreadable_markers_version_setting_undecidable_engine_image_kept() -> None:
    """The watcher's UNREADABLE marker: for the version setting the gate must not decide (it would
    read as a fresh install); an EngineImage keeps what was last known of it."""
    collector = StartupView(NS)
    collector.apply(ev(EventType.ADDED, "engineimage", "ei-a", engine_image("ei-a", 7)))
    marker = msgspec.structs.replace(
        ev(EventType.UNREADABLE, "engineimage", "ei-a"), reason="Expected `int`, got `str`"
    )
    collector.apply(marker)
    assert [e.metadata.name for e in collector.view().engine_images] == ["ei-a"]
    with pytest.raises(ValueError, match="does not decode: Expected `int`"):
        collector.apply(
            msgspec.structs.replace(
                ev(EventType.UNREADABLE, "setting", "current-longhorn-version"),
                reason="Expected `int`, got `str`",
            )
        )
