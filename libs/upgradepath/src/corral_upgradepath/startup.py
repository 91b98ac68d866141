"""The gate every corral service passes at start-up, before it acts on anything.

A decision service holds no Kubernetes credentials, so it judges the cluster from the bus (the
`current-longhorn-version` Setting and the EngineImages the watcher publishes) and reports through
the actuator: `gate_event_commands` turns the decision into CREATE commands for core/v1 Events that
the service publishes to LH_COMMANDS. On a blocked path the service then exits non-zero without
having issued any other command; Longhorn's manager crash-loops the same way, and the old version
keeps serving.

The view must be complete before deciding: a view that has not yet seen the version setting looks
like a fresh install, which is always allowed. `StartupView` therefore only reports ready once the
watcher's RESYNCED marker has arrived for both kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from corral_model.envelopes import Command, EventType, ObjectEvent, Target, Verb, new_command
from corral_model.longhorn import EngineImage, Setting
from corral_model.subjects import GATE_SERVICE
from corral_upgradepath.build import BuildInfo
from corral_upgradepath.cluster import CURRENT_VERSION_SETTING, ClusterView
from corral_upgradepath.decision import GateDecision
from corral_upgradepath.events import decision_events, event_body, event_name
from corral_upgradepath.gate import check_against_build

VERSION_CHECK_ENV = "CORRAL_UPGRADE_VERSION_CHECK"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_GATE_KINDS = frozenset({"setting", "engineimage"})


def version_check_from_env(environ: Mapping[str, str]) -> bool:
    """The bypass flag (Longhorn's `--upgrade-version-check`), on unless explicitly turned off."""
    raw = environ.get(VERSION_CHECK_ENV, "true").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{VERSION_CHECK_ENV}={raw!r}: expected true or false")


def startup_decision(
    view: ClusterView,
    *,
    version_check: bool = True,
    distro: str | None = None,
    build: BuildInfo | None = None,
) -> GateDecision:
    """The gate against this build: `distro` defaults to `$LONGHORN_DISTRO`, `build` to build.toml."""
    return check_against_build(
        view.current_version,
        engine_images=view.engine_images,
        version_check=version_check,
        distro=distro,
        build=build,
    )


def gate_event_commands(
    decision: GateDecision,
    *,
    service: str,
    namespace: str,
    now: float,
    setting_uid: str = "",
) -> tuple[Command, ...]:
    """CREATE commands for the Events reporting `decision` (bypass warnings, then the outcome).

    `service` is the deciding service's name: the Events' source component is `corral-<service>`.
    The commands themselves go under the service name `upgrade-gate` (`lh.cmd.upgrade-gate.event.…`,
    corral_model.subjects.GATE_SERVICE): the gate runs before the service holds its lease, so they
    carry no lease term, and a name of their own lets the actuator's policy fence every decision
    service's own commands while these (Events, create only) stay unfenced. `setting_uid` (the
    version Setting's uid, when known) pins `involvedObject` to that exact object.
    """
    component = f"corral-{service}"
    commands = []
    for event in decision_events(decision):
        name = event_name(component, decision, event)
        body = event_body(
            event, name=name, namespace=namespace, component=component, now=now, setting_uid=setting_uid
        )
        commands.append(
            new_command(
                service=GATE_SERVICE,
                verb=Verb.CREATE,
                target=Target(kind="Event", namespace=namespace, name=name),
                body=body,
                reason=f"upgrade gate: {decision.summary()}",
                created_at=now,
            )
        )
    return tuple(commands)


class StartupView:
    """Collects the gate's inputs from LH_OBJECTS events and says when they are complete.

    Feed it every `setting` and `engineimage` ObjectEvent (typed or `ObjectEvent[Any]`); it keeps
    the version setting and the engine images by name, and is `ready` once a RESYNCED marker has
    been seen for both kinds. An event whose object cannot be decoded, or an UNREADABLE marker for
    the version setting, raises ValueError (the caller dead-letters it): skipping a broken version
    setting would read as a fresh install. An UNREADABLE EngineImage keeps its last known state.
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._version_setting: Setting | None = None
        self._engine_images: dict[str, EngineImage] = {}
        self._resynced: set[str] = set()

    @staticmethod
    def _token(kind: str) -> str | None:
        """The kind token; events may name the kind by token (`setting`) or by kind (`Setting`)."""
        lowered = kind.lower()
        return lowered if lowered in _GATE_KINDS else None

    def apply(self, event: ObjectEvent[Any]) -> None:
        token = self._token(event.kind)
        if token is None or event.namespace not in ("", self.namespace):
            return
        if event.type is EventType.RESYNCED:
            self._resynced.add(token)
            return
        if token == "setting":
            if event.name != CURRENT_VERSION_SETTING:
                return
            if event.type is EventType.UNREADABLE:
                raise ValueError(f"the {event.name} setting does not decode: {event.reason}")
            self._version_setting = (
                None if event.type is EventType.DELETED else _as(event.object, Setting, event.name)
            )
        elif event.type is EventType.UNREADABLE:
            # An EngineImage the watcher could not read (it is in LH_DEAD): the gate keeps what it
            # last knew of it, as it did before such markers existed; only the version setting is
            # worth refusing to decide for.
            return
        elif event.type is EventType.DELETED:
            self._engine_images.pop(event.name, None)
        else:
            self._engine_images[event.name] = _as(event.object, EngineImage, event.name)

    @property
    def ready(self) -> bool:
        return self._resynced >= _GATE_KINDS

    def view(self) -> ClusterView:
        return ClusterView(
            version_setting=self._version_setting,
            engine_images=tuple(self._engine_images[n] for n in sorted(self._engine_images)),
        )


def _as(obj: Any, struct: type[Setting] | type[EngineImage], name: str) -> Any:
    if isinstance(obj, struct):
        return obj
    if obj is None:
        raise ValueError(f"{struct.__name__} event for {name} carries no object")
    return msgspec.convert(obj, struct)
