"""engine-upgrade's rules, held by the actuator on the volume itself, whoever sends the command.

The policy lets engine-upgrade set a volume's `spec.image` to the default engine image and nothing
else, but a command that is well-formed can still be wrong: the issue-29 probe, holding only
engine-upgrade's credentials, upgraded all 9 volumes of a node at once against a limit of 2, and a
degraded volume and a DR standby live. So before such a write the actuator judges the volume as
Longhorn's engine-image controller would (spec/longhorn-behaviour.md §1.3):

* a limit is in force: Longhorn's `concurrent-automatic-engine-upgrade-per-node-limit` when it is
  above 0 (corral replaces Longhorn's loop with Longhorn's limit), else corral's own per-node limit
  (engine-upgrade in modes auto and act, beside a Longhorn whose loop is off); 0 refuses all;
* the volume may be upgraded: detached (offline), or attached and healthy, not a DR standby, not
  expanding, not migrating and not strict-local (live); never a v2 volume (Longhorn skips those);
* its owner node stays within the limit: the upgrades in flight there (spec.image ≠
  status.currentImage, grouped by status.ownerID), other than this one, are fewer than the limit.

A rollback (spec.image set to the status.currentImage the command tests: a stuck upgrade's way out,
corral_engine_upgrade.rollback) is judged as Longhorn's engineUpgrade API judges one (§1.5 rule 4):
the volume is a v1 volume and runs, on the facts read, exactly the image the rollback writes. A
forged rollback to an image the volume does not run is refused by name, whatever it tests; the per-
node limit and eligibility do not apply (a rollback ends an upgrade, it starts none).

The facts come from the actuator's own informer of the volumes (volume_facts.py). A count at the
limit is never trusted blindly: the volumes it names are read again, one by one, so a volume that
finished a moment ago never costs a decider its retry backoff. Judging and writing hold the owner
node's lock, and the write tests the resourceVersion judged, so two commands for one node cannot
both take its last slot, and nothing can change the volume in between.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from corral_actuator.api import KubeApi
from corral_actuator.settings import SettingValues
from corral_actuator.volume_facts import VolumeInformer
from corral_model import longhorn as lh
from corral_model.envelopes import Command, FieldValue, Verb
from corral_model.kinds import KINDS

SERVICE = "engine-upgrade"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
IMAGE_PATH = "/spec/image"
CURRENT_IMAGE_PATH = "/status/currentImage"
_VOLUME = KINDS["volume"]


def ineligible(volume: lh.Volume) -> str | None:
    """Why Longhorn would not upgrade this volume automatically (None: it would)."""
    spec, status = volume.spec, volume.status
    if spec.data_engine == "v2":
        return "a v2 volume is upgraded by v2-upgrade, never by automatic engine upgrade"
    if status.state == "detached":
        return None  # offline upgrade: nothing else is checked
    if status.state != "attached":
        return (
            f"the volume is {status.state or 'in no state'}: neither detached (offline) nor attached (live)"
        )
    if status.robustness != "healthy":
        return f"a live upgrade needs a healthy volume; it is {status.robustness or 'of unknown health'}"
    if status.is_standby:
        return "the volume is a DR standby"
    if status.expansion_required:
        return "the volume is expanding"
    if spec.migration_node_id or status.current_migration_node_id:
        return "the volume is migrating"
    if spec.data_locality == "strict-local":
        return "a strict-local volume cannot be upgraded live"
    return None


def _image_set(command: Command) -> FieldValue | None:
    """The command's change of spec.image (None: it changes no image). A plain loop, no generator:
    every command is asked, and every engine upgrade three times more."""
    for change in command.changes:
        if change.path == IMAGE_PATH:
            return change
    return None


def rollback_target(command: Command) -> str | None:
    """The image a rollback writes: the command sets spec.image to the status.currentImage it tests
    (None: not a rollback)."""
    change = _image_set(command)
    image = None if change is None else change.value
    if not isinstance(image, str):
        return None
    for p in command.preconditions:
        if p.path == CURRENT_IMAGE_PATH and p.value == image:
            return image
    return None


def rollback_refusal(volume: lh.Volume, image: str) -> str | None:
    """Why rolling `volume` back to `image` is not what Longhorn would allow (None: it is)."""
    if volume.spec.data_engine == "v2":
        return "rollback: a v2 volume is upgraded by v2-upgrade, never rolled back by engine-upgrade"
    current = volume.status.current_image
    if current != image:
        return (
            f"rollback: a volume goes back only to the image it runs (status.currentImage"
            f" {current or '(none)'!r}), not to {image!r}"
        )
    return None


def as_volume(document: dict[str, Any]) -> lh.Volume:
    return msgspec.convert(document, lh.Volume)


def _limit(value: str | None) -> int:
    try:
        return int(value or "0")
    except ValueError:
        return 0


class EngineUpgradeGuard:
    def __init__(self, api: KubeApi, settings: SettingValues, own_limit: int = 1) -> None:
        self._api = api
        self._settings = settings
        self._own_limit = own_limit
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._informers: dict[str, VolumeInformer] = {}

    @staticmethod
    def applies(command: Command) -> bool:
        return (
            command.service == SERVICE
            and command.verb is Verb.PATCH
            and command.target.kind == _VOLUME.kind
            and _image_set(command) is not None
        )

    @staticmethod
    def owner(command: Command) -> str:
        """The owner node the command says it counted against (the write tests it, or that there
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

    async def volumes(self, namespace: str) -> VolumeInformer:
        informer = self._informers.get(namespace)
        if informer is None:
            informer = self._informers[namespace] = VolumeInformer(self._api.api, namespace)
        await informer.ready()
        return informer

    def _listed(self, namespace: str) -> VolumeInformer | None:
        """The namespace's informer once its first list is in (its watch keeps it from then on),
        without a coroutine: every engine upgrade asks for it three times. None: ask `volumes`."""
        informer = self._informers.get(namespace)
        return informer if informer is not None and informer.listed else None

    async def cached(self, command: Command) -> lh.Volume | None:
        """The volume as the informer last saw it (None: not seen)."""
        namespace = command.target.namespace
        informer = self._listed(namespace) or await self.volumes(namespace)
        return informer.get(command.target.name)

    async def judge(self, command: Command, volume: lh.Volume) -> str | None:
        """The invariant this upgrade would break, named, or None. Call under `lock(command)`."""
        rollback = rollback_target(command)
        if rollback is not None:
            return rollback_refusal(volume, rollback)
        namespace, name = command.target.namespace, command.target.name
        longhorn = _limit(await self._settings.value(namespace, LIMIT_SETTING, not_before=command.created_at))
        limit = longhorn if longhorn > 0 else self._own_limit
        if limit <= 0:
            return (
                f"automatic engine upgrade is off ({LIMIT_SETTING} is {longhorn}"
                f" and corral's own per-node limit is {self._own_limit})"
            )
        reason = ineligible(volume)
        if reason is not None:
            return f"engine-upgrade eligibility: {reason}"
        owner = volume.status.owner_id
        counted = (self._listed(namespace) or await self.volumes(namespace)).in_flight(owner)
        # Counted in place, not copied: a node with many upgrades in flight costs a wave nothing.
        if len(counted) - (name in counted) < limit:
            return None
        others = await self._in_flight(namespace, owner, besides=name, limit=limit)
        if len(others) >= limit:
            names = ", ".join(sorted(others)[:5])
            return (
                f"per-node limit: {len(others)} upgrades already in flight on owner node"
                f" {owner or '(none)'} ({names}), limit {limit}"
            )
        return None

    async def judge_document(self, command: Command, document: dict[str, Any]) -> str | None:
        """`judge` on the volume as just read (which the informer learns too)."""
        volume = as_volume(document)
        (await self.volumes(command.target.namespace)).observe(volume)
        return await self.judge(command, volume)

    async def written(self, command: Command, resource_version: str) -> None:
        """The upgrade landed at `resource_version`: in flight from now on."""
        namespace = command.target.namespace
        informer = self._listed(namespace) or await self.volumes(namespace)
        volume = informer.get(command.target.name)
        change = _image_set(command)
        image = None if change is None else change.value
        if volume is not None and isinstance(image, str):
            informer.written(volume, image, resource_version)

    async def _in_flight(self, namespace: str, owner: str, *, besides: str, limit: int) -> set[str]:
        informer = await self.volumes(namespace)
        names = informer.in_flight(owner) - {besides}
        if len(names) < limit:
            return names
        # At the limit: check what is counted against the volumes themselves before refusing.
        for name in sorted(names):
            volume = await self._read(namespace, name)
            if volume is None:
                names.discard(name)
                continue
            informer.observe(volume)
            if volume.spec.image == volume.status.current_image or volume.status.owner_id != owner:
                names.discard(name)
        return names

    async def _read(self, namespace: str, name: str) -> lh.Volume | None:
        document = await self._api.read(_VOLUME.path(namespace, name), f"volume {name}")
        return None if document is None else as_volume(document)

    async def close(self) -> None:
        for informer in self._informers.values():
            await informer.close()
