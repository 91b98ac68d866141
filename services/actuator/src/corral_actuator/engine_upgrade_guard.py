"""engine-upgrade's rules, held by the actuator on the volume itself, whoever sends the command.

The policy lets engine-upgrade set a volume's `spec.image` to the default engine image and nothing
else, but a command that is well-formed can still be wrong: the issue-29 probe, holding only
engine-upgrade's credentials, upgraded all 9 volumes of a node at once against a limit of 2, and a
degraded volume and a DR standby live. So before such a write the actuator reads the volume and
judges it as Longhorn's engine-image controller would (spec/longhorn-behaviour.md §1.3):

* automatic upgrade is on: `concurrent-automatic-engine-upgrade-per-node-limit` > 0;
* the volume may be upgraded: detached (offline), or attached and healthy, not a DR standby, not
  expanding, not migrating and not strict-local (live); never a v2 volume (Longhorn skips those);
* its owner node stays within the limit: the actuator's own count of upgrades in flight there
  (spec.image ≠ status.currentImage, grouped by status.ownerID) is below it.

The count is a ledger: one list of the volumes when it is first needed, every upgrade the actuator
applies added as it lands, and a full re-list at most every `relist_s` (so writes by others, such
as an operator editing spec.image by hand, are counted too). A count at the limit is never trusted
blindly: the volumes it names are read again, one by one, and those no longer in flight leave it,
so a volume that finished a moment ago never costs a decider its retry backoff. Judging and writing
hold the owner node's lock, and the write tests the resourceVersion judged, so two commands for one
node cannot both take its last slot, and nothing can change the volume in between.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from corral_actuator.api import KubeApi
from corral_actuator.classify import Answer, TransientApiError
from corral_actuator.settings import SettingValues
from corral_kube.patching import resolve
from corral_model.envelopes import Command, Verb
from corral_model.kinds import KINDS

SERVICE = "engine-upgrade"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
_VOLUME = KINDS["volume"]


def _text(document: dict[str, Any], path: str) -> str:
    value = resolve(document, path)
    return value if isinstance(value, str) else ""


def _flag(document: dict[str, Any], path: str) -> bool:
    return resolve(document, path) is True


def in_flight(volume: dict[str, Any]) -> bool:
    """Longhorn's definition: an upgrade is under way while spec.image ≠ status.currentImage."""
    return _text(volume, "/spec/image") != _text(volume, "/status/currentImage")


def ineligible(volume: dict[str, Any]) -> str | None:
    """Why Longhorn would not upgrade this volume automatically (None: it would)."""
    if _text(volume, "/spec/dataEngine") == "v2":
        return "a v2 volume is upgraded by v2-upgrade, never by automatic engine upgrade"
    state = _text(volume, "/status/state")
    if state == "detached":
        return None  # offline upgrade: nothing else is checked
    if state != "attached":
        return f"the volume is {state or 'in no state'}: neither detached (offline) nor attached (live)"
    robustness = _text(volume, "/status/robustness")
    if robustness != "healthy":
        return f"a live upgrade needs a healthy volume; it is {robustness or 'of unknown health'}"
    if _flag(volume, "/status/isStandby"):
        return "the volume is a DR standby"
    if _flag(volume, "/status/expansionRequired"):
        return "the volume is expanding"
    if _text(volume, "/spec/migrationNodeID") or _text(volume, "/status/currentMigrationNodeID"):
        return "the volume is migrating"
    if _text(volume, "/spec/dataLocality") == "strict-local":
        return "a strict-local volume cannot be upgraded live"
    return None


def _limit(value: str | None) -> int:
    try:
        return int(value or "0")
    except ValueError:
        return 0


class EngineUpgradeGuard:
    def __init__(
        self,
        api: KubeApi,
        settings: SettingValues,
        *,
        relist_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._settings = settings
        self._relist_s = relist_s
        self._clock = clock
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        # (namespace, owner node) -> names of the volumes in flight there
        self._ledger: dict[tuple[str, str], set[str]] = {}
        self._listed: dict[str, float] = {}  # namespace -> when it was last listed

    @staticmethod
    def applies(command: Command) -> bool:
        return (
            command.service == SERVICE
            and command.verb is Verb.PATCH
            and command.target.kind == _VOLUME.kind
            and any(c.path == "/spec/image" for c in command.changes)
        )

    @staticmethod
    def owner(command: Command) -> str:
        """The owner node the command says it counted against (the patch tests it, or that there
        is none: the policy's `ifOmitted`)."""
        for p in command.preconditions:
            if p.path == "/status/ownerID" and isinstance(p.value, str):
                return p.value
        return ""

    def lock(self, command: Command) -> asyncio.Lock:
        key = (command.target.namespace, self.owner(command))
        found = self._locks.get(key)
        if found is None:
            found = self._locks[key] = asyncio.Lock()
        return found

    async def judge(self, command: Command, volume: dict[str, Any]) -> str | None:
        """The invariant this upgrade would break, named, or None. Call under `lock(command)`."""
        namespace, name = command.target.namespace, command.target.name
        limit = _limit(await self._settings.value(namespace, LIMIT_SETTING, not_before=command.created_at))
        if limit <= 0:
            return f"automatic engine upgrade is off ({LIMIT_SETTING} is {limit})"
        reason = ineligible(volume)
        if reason is not None:
            return f"engine-upgrade eligibility: {reason}"
        owner = _text(volume, "/status/ownerID")
        others = await self._in_flight(namespace, owner, besides=name, limit=limit)
        if len(others) >= limit:
            names = ", ".join(sorted(others)[:5])
            return (
                f"per-node limit: {len(others)} upgrades already in flight on owner node"
                f" {owner or '(none)'} ({names}), limit {limit}"
            )
        return None

    def applied(self, command: Command, owner: str) -> None:
        """The upgrade landed: it is in flight on `owner` until a read shows it done."""
        self._ledger.setdefault((command.target.namespace, owner), set()).add(command.target.name)

    async def _in_flight(self, namespace: str, owner: str, *, besides: str, limit: int) -> set[str]:
        if self._clock() - self._listed.get(namespace, -float("inf")) >= self._relist_s:
            await self._relist(namespace)
        names = self._ledger.setdefault((namespace, owner), set())
        names.discard(besides)  # its own upgrade is the one being judged
        # At the limit? Check what is counted against the volumes themselves before refusing.
        for name in list(names) if len(names) >= limit else ():
            volume = await self._read(namespace, name)
            if volume is None or not in_flight(volume) or _text(volume, "/status/ownerID") != owner:
                names.discard(name)
        return set(names)

    async def _relist(self, namespace: str) -> None:
        started = self._clock()
        answered = await self._api.get(_VOLUME.path(namespace))
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            raise TransientApiError(f"listing volumes to count upgrades in flight: HTTP {answered.status}")
        ledger: dict[tuple[str, str], set[str]] = {}
        for volume in document.get("items") or []:
            if isinstance(volume, dict) and in_flight(volume):
                owner = _text(volume, "/status/ownerID")
                ledger.setdefault((namespace, owner), set()).add(_text(volume, "/metadata/name"))
        for key in [k for k in self._ledger if k[0] == namespace]:
            # Writes that landed while the list was read are in neither or both: keep ours.
            self._ledger[key] = ledger.pop(key, set()) | self._ledger[key]
        self._ledger.update(ledger)
        self._listed[namespace] = started

    async def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        answered = await self._api.get(_VOLUME.path(namespace, name))
        if answered.answer is Answer.NOT_FOUND:
            return None
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            raise TransientApiError(f"reading volume {name}: HTTP {answered.status}")
        return document
