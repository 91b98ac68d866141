"""Compact per-object records: the few facts the engine-upgrade rules read, nothing else.

A decision service tracks every volume of the cluster (100 k of them), so the view keeps a small
mutable record per volume instead of the slim Kubernetes object: about a dozen fields, strings
interned (images, node names and states repeat across thousands of volumes, so they are shared).
Records are compared by identity (what the owner lists and queues need). The small Structs
(image records, the kit's expectations) are `gc=False`: they hold no reference cycles and
the collector should never walk them; the runner freezes the view after bootstrap for the same
reason (`gc.freeze`).

Replicas are folded into their volume's record, three machine integers each (key, node, rv) in
one array: the rules only need the node each replica is scheduled on (longhorn-behaviour.md §1.3,
"ready on all volume replicas").
"""

from __future__ import annotations

import sys
from array import array
from itertools import compress
from operator import countOf
from typing import TypeAlias

import msgspec

from corral_decision.expectations import Expectation
from corral_engine_upgrade.desk import Desk
from corral_engine_upgrade.image_facts import AnyEngineImage, DeploymentStatus, NodeMap, node_map
from corral_engine_upgrade.volume_facts import AnyVolume
from corral_model import longhorn as lh
from corral_model.envelopes import Target

_intern = sys.intern

DATA_ENGINE_V2 = "v2"

# The wave guard's annotations on the default EngineImage (wave_guard.py): the pause corral wrote
# ("<id>: <reason>"), and the pause id the operator resumed (`corral engine-upgrade resume`).
WAVE_PAUSED = "engine-upgrade.corral.io/wave-paused"
WAVE_RESUMED = "engine-upgrade.corral.io/wave-resumed"

# A stuck volume's way out (rollback.py), on the Volume: the operator's approval to roll back the
# upgrade stuck on the image it names (`corral engine-upgrade rollback`), and, written by the
# rollback itself, the image it was rolled back from (the volume is held off that image).
ROLLBACK_APPROVED = "engine-upgrade.corral.io/rollback-approved"
ROLLED_BACK = "engine-upgrade.corral.io/rolled-back"


_HEX = "0123456789abcdef"


def replica_key(volume: str, name: str) -> int:
    """What a volume's replica is known by among its siblings. Longhorn names a replica
    `<volume>-r-<8 lowercase hex digits>`: such a name is kept as the number its digits spell (0 or
    more). Any other name gets a negative number of its own, from a table kept for the process, so
    two different names never share a key (hence the checks: `int()` would also take upper case,
    `_`, signs, spaces and non-ASCII digits). Longhorn names every replica so: outside tests that
    table stays empty."""
    # One split at the last "-r-" (8 hex digits hold none): cheaper than testing each part apart.
    head, _, digits = name.rpartition("-r-")
    if head == volume and len(digits) == 8 and not digits.strip(_HEX):  # all lowercase hex digits
        return int(digits, 16)
    key = _ODD_KEYS.get(name)
    if key is None:
        _ODD_NAMES.append(_intern(name))
        key = _ODD_KEYS[name] = -len(_ODD_NAMES)
    return key


def replica_name(volume: str, key: int) -> str:
    """The name `replica_key` made `key` of."""
    return f"{volume}-r-{key:08x}" if key >= 0 else _ODD_NAMES[-key - 1]


_ODD_KEYS: dict[str, int] = {}
_ODD_NAMES: list[str] = []

# Node names as small numbers, for the process (a few thousand nodes at most): a replica's node is
# kept as one, so a volume's replicas fit in one array of machine integers. 0 is "" (not scheduled).
_NODE_IDS: dict[str, int] = {"": 0}
NODE_NAMES: list[str] = [""]
"""The node name of each number `node_id` gave."""


def node_id(name: str) -> int:
    """The number of node `name` (given once per name, for the life of the process)."""
    found = _NODE_IDS.get(name)
    if found is None:
        NODE_NAMES.append(_intern(name))
        found = _NODE_IDS[name] = len(NODE_NAMES) - 1
    return found


# VolumeRecord.replicas holds three machine integers per replica, flat, in one array: no object per
# replica and no int object per number (a tuple of Python ints cost ~300 bytes a volume, the array
# ~140): its key (`replica_key`), the number of the node it is scheduled on (`node_id`, 0 until it
# is) and its resourceVersion (older events of the replica are ignored). A known replica's node and
# resourceVersion are updated in place; adding or removing one makes a new array, so the shared
# empty one (`NO_REPLICAS`) is never written to.
Replicas: TypeAlias = "array[int]"
KEY, NODE, RV, STRIDE = 0, 1, 2, 3
NO_REPLICAS: Replicas = array("q")


def replicas_of(*items: int) -> Replicas:
    """A Replicas array of these flat items (key, node number, rv per replica)."""
    return array("q", items)


def replica_nodes(replicas: Replicas) -> list[str]:
    """The names of the nodes the replicas are scheduled on (one per replica, "" not scheduled)."""
    names = NODE_NAMES
    return [names[number] for number in replicas[NODE::STRIDE]]


# VolumeRecord.flags: the Volume's yes/no facts the rules read, one bit each (one small int per
# record instead of five fields; and "none of them" — nearly every volume — is one test).
STANDBY = 1  # status.isStandby: a DR volume
EXPANSION_REQUIRED = 2  # status.expansionRequired
MIGRATING = 4  # spec.migrationNodeID or status.currentMigrationNodeID set
STRICT_LOCAL = 8  # spec.dataLocality == strict-local
V2 = 16  # spec.dataEngine == v2
# (32 is the view's UNREADABLE.) One of the rollback annotations is on the volume (`marks`).
MARKED = 64
# Two bits of the decider's filing (slots.py), kept here rather than in two more fields (8 bytes
# each on every record), and kept by update_from: the pick-order rank the volume is filed under in
# its owner's members is LIVE (0), not OFFLINE (1) (`member_rank`, pick_order.py) …
FILED_LIVE = 128
# … and the record was deleted (`alive` is False). The bits a live volume may carry add up to 255
# at most, so its flags stay one of the ints Python shares (up to 256) instead of one of its own.
DEAD = 256
_FILING = DEAD | FILED_LIVE


class Marks(msgspec.Struct, frozen=True, gc=False):
    """The rollback annotations of a volume (rollback.py); "" when absent. Kept only on the few
    volumes that carry one."""

    approved: str = ""  # ROLLBACK_APPROVED: the image whose stuck upgrade the operator let roll back
    rolled_back: str = ""  # ROLLED_BACK: the image the volume was rolled back from


def marks_of(annotations: dict[str, str]) -> Marks | None:
    approved = annotations.get(ROLLBACK_APPROVED, "")
    rolled_back = annotations.get(ROLLED_BACK, "")
    return Marks(approved, rolled_back) if approved or rolled_back else None


class VolumeRecord(msgspec.Struct, gc=False, eq=False, repr_omit_defaults=True):
    """The view of one Volume. Mutated in place so its identity (and index memberships) is stable;
    two records are equal only when they are the same object."""

    namespace: str
    name: str
    rv: int = -1
    # metadata.uid, UTF-8 encoded: Events about the volume name it (`uid`), so `kubectl describe`
    # lists them. Only ever handed on, never read by the rules: as bytes it costs 16 bytes less.
    uid_utf8: bytes = b""
    generation: int = 0  # metadata.generation: the spec a command was decided on (core.preconditions)
    spec_image: str = ""
    current_image: str = ""
    state: str = ""
    robustness: str = ""
    owner: str = ""  # status.ownerID: the unit of the per-node limit
    node: str = ""  # status.currentNodeID: where it is attached
    # STANDBY | EXPANSION_REQUIRED | MIGRATING | STRICT_LOCAL | V2 | MARKED, and the filing bits
    # DEAD | FILED_LIVE (`alive`, `member_rank`)
    flags: int = 0
    replicas: Replicas = NO_REPLICAS  # see Replicas above
    # --- decider bookkeeping (core.py, slots.py and the kit's track): on its desk, while set ------
    member_of: str | None = None  # the owner node whose member list holds this volume
    epoch: int = -1  # the rules epoch this volume was last judged under (see slots.py)
    desk: Desk | None = None  # the rarely set rest (desk.py), None while all of it is default

    @property
    def expectation(self) -> Expectation | None:
        desk = self.desk
        return desk.expectation if desk is not None else None

    @expectation.setter
    def expectation(self, value: Expectation | None) -> None:
        desk = self.desk
        if desk is None:
            if value is None:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.expectation = value

    @property
    def hold_rv(self) -> int:
        desk = self.desk
        return desk.hold_rv if desk is not None else -2

    @hold_rv.setter
    def hold_rv(self, value: int) -> None:
        desk = self.desk
        if desk is None:
            if value == -2:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.hold_rv = value

    @property
    def hold_until(self) -> float:
        desk = self.desk
        return desk.hold_until if desk is not None else 0.0

    @hold_until.setter
    def hold_until(self, value: float) -> None:
        desk = self.desk
        if desk is None:
            if value == 0.0:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.hold_until = value

    @property
    def slot_node(self) -> str | None:
        desk = self.desk
        return desk.slot_node if desk is not None else None

    @slot_node.setter
    def slot_node(self, value: str | None) -> None:
        desk = self.desk
        if desk is None:
            if value is None:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.slot_node = value

    @property
    def candidate_node(self) -> str | None:
        desk = self.desk
        return desk.candidate_node if desk is not None else None

    @candidate_node.setter
    def candidate_node(self, value: str | None) -> None:
        desk = self.desk
        if desk is None:
            if value is None:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.candidate_node = value

    @property
    def queue_seq(self) -> int:
        desk = self.desk
        return desk.queue_seq if desk is not None else 0

    @queue_seq.setter
    def queue_seq(self, value: int) -> None:
        desk = self.desk
        if desk is None:
            if value == 0:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.queue_seq = value

    @property
    def announced(self) -> str:
        desk = self.desk
        return desk.announced if desk is not None else ""

    @announced.setter
    def announced(self, value: str) -> None:
        desk = self.desk
        if desk is None:
            if value == "":
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.announced = value

    def tidy(self, now: float) -> None:
        """Drop the desk once nothing on it matters any more (Desk.idle)."""
        desk = self.desk
        if desk is not None and desk.idle(now):
            self.desk = None

    @property
    def marks(self) -> Marks | None:
        """The rollback annotations, on the few volumes that carry one (on the desk)."""
        desk = self.desk
        return desk.marks if desk is not None else None

    @marks.setter
    def marks(self, value: Marks | None) -> None:
        desk = self.desk
        if desk is None:
            if value is None:
                return  # a default on no desk: nothing to keep
            desk = self.desk = Desk()
        desk.marks = value

    @property
    def alive(self) -> bool:
        """Not deleted (a deleted volume's record may still sit in queues and timers)."""
        return not self.flags & DEAD

    @alive.setter
    def alive(self, value: bool) -> None:
        self.flags = self.flags & ~DEAD if value else self.flags | DEAD

    @property
    def member_rank(self) -> int:
        """The pick-order rank it is filed under in its owner's members (pick_order.py)."""
        return 0 if self.flags & FILED_LIVE else 1

    @member_rank.setter
    def member_rank(self, value: int) -> None:
        self.flags = self.flags | FILED_LIVE if value == 0 else self.flags & ~FILED_LIVE

    @property
    def uid(self) -> str:
        """metadata.uid ("" when unknown)."""
        return self.uid_utf8.decode()

    @property
    def about(self) -> Target:
        """The volume as its Events name it: with its uid, or `kubectl describe volume` would not
        list them (it matches by uid)."""
        return Target(kind="Volume", namespace=self.namespace, name=self.name, uid=self.uid)

    @property
    def standby(self) -> bool:
        return bool(self.flags & STANDBY)

    @property
    def expansion_required(self) -> bool:
        return bool(self.flags & EXPANSION_REQUIRED)

    @property
    def migrating(self) -> bool:
        return bool(self.flags & MIGRATING)

    @property
    def strict_local(self) -> bool:
        return bool(self.flags & STRICT_LOCAL)

    @property
    def v2(self) -> bool:
        return bool(self.flags & V2)

    @property
    def in_progress(self) -> bool:
        """Longhorn's definition of an upgrade in flight (§1.1)."""
        return self.spec_image != self.current_image

    @property
    def holds_slot(self) -> bool:
        desk = self.desk
        return self.spec_image != self.current_image or (desk is not None and desk.expectation is not None)

    @classmethod
    def new(cls, namespace: str, name: str, volume: AnyVolume, rv: int, replicas: Replicas) -> VolumeRecord:
        """The record `update_from` makes of a blank one, made in one step: a cold start makes one
        per volume of the cluster (100 k), where setting and comparing field by field was a fifth
        of applying its events."""
        spec, status, meta = volume.spec, volume.status, volume.metadata
        record = cls(
            namespace=namespace,
            name=name,
            rv=rv,
            uid_utf8=meta.uid.encode(),
            generation=meta.generation,
            spec_image=_intern(spec.image),
            current_image=_intern(status.current_image),
            state=_intern(status.state),
            robustness=_intern(status.robustness),
            owner=_intern(status.owner_id),
            node=_intern(status.current_node_id),
            flags=_volume_flags(volume),
            replicas=replicas,
        )
        marks = marks_of(meta.annotations) if meta.annotations else None
        if marks is not None:
            record.flags |= MARKED
            record.marks = marks
        return record

    def update_from(self, volume: AnyVolume, rv: int) -> bool:
        """Take the new state; True when a fact the rules read changed (most Volume updates, like
        size or condition changes, change none). Field by field, interning only what changed: this
        runs for every Volume event."""
        spec, status = volume.spec, volume.status
        self.rv = rv
        self.uid_utf8 = volume.metadata.uid.encode()  # not a fact the rules read: never `changed`
        self.generation = volume.metadata.generation  # nor this: only what a command tests
        changed = False
        value = spec.image
        if value != self.spec_image:
            self.spec_image = _intern(value)
            changed = True
        value = status.current_image
        if value != self.current_image:
            self.current_image = _intern(value)
            changed = True
        value = status.state
        if value != self.state:
            self.state = _intern(value)
            changed = True
        value = status.robustness
        if value != self.robustness:
            self.robustness = _intern(value)
            changed = True
        value = status.owner_id
        if value != self.owner:
            self.owner = _intern(value)
            changed = True
        value = status.current_node_id
        if value != self.node:
            self.node = _intern(value)
            changed = True
        flags = self.flags & _FILING | _volume_flags(volume)  # the filing bits are the decider's
        annotations = volume.metadata.annotations
        if annotations or self.flags & MARKED:  # nearly always neither (MARKED: marks is set)
            marks = marks_of(annotations) if annotations else None
            if marks is not None:
                flags |= MARKED
            if marks != self.marks:
                self.marks = marks
                changed = True
        if flags != self.flags:
            self.flags = flags
            changed = True
        return changed


def _volume_flags(volume: AnyVolume) -> int:
    """The flags a Volume's own state sets (not the decider's filing bits, nor MARKED)."""
    spec, status = volume.spec, volume.status
    flags = 0
    if status.is_standby:
        flags |= STANDBY
    if status.expansion_required:
        flags |= EXPANSION_REQUIRED
    if spec.migration_node_id or status.current_migration_node_id:
        flags |= MIGRATING
    if spec.data_locality == "strict-local":
        flags |= STRICT_LOCAL
    if spec.data_engine == DATA_ENGINE_V2:
        flags |= V2
    return flags


class ImageRecord(msgspec.Struct, frozen=True, gc=False):
    """The facts of one EngineImage the rules read: readiness per node and controller-API versions."""

    name: str
    image: str
    rv: int
    state_ok: bool  # status.state is `deployed` or `deploying` (§1.3: both count)
    ready_nodes: frozenset[str]  # nodes whose nodeDeploymentMap entry is true
    # The same nodes by number (`node_id`), as a volume's replicas name them: the rules test those
    # without going back to the names.
    ready_numbers: frozenset[int]
    controller_api_version: int
    controller_api_min_version: int
    # Longhorn's EngineImage sync returns before the auto-upgrade step when the image is being
    # deleted or its CLI API is incompatible (§1.2): then it cannot be the upgrade target.
    usable: bool = True
    # The nodeDeploymentMap the record was built from (image_facts.py), to tell cheaply that a
    # later one is the same.
    deployment: NodeMap = msgspec.field(default_factory=dict)
    # Where it is, for Events about it (`kubectl describe` lists Events by uid).
    namespace: str = ""
    uid: str = ""
    # The wave guard's annotations (WAVE_PAUSED, WAVE_RESUMED): "" when absent.
    paused: str = ""
    resumed: str = ""
    # status.state is `deployed`: a stuck volume may be rolled back to it (rollback.py).
    deployed: bool = False

    @classmethod
    def from_object(cls, ei: AnyEngineImage, rv: int) -> ImageRecord:
        """Raises msgspec.ValidationError / DecodeError for a node map that is not {node: bool}."""
        status = ei.status
        deployment = node_map(status.node_deployment_map)
        ready_nodes = frozenset(compress(deployment, deployment.values()))
        return cls(
            name=_intern(ei.metadata.name),
            image=_intern(ei.spec.image),
            rv=rv,
            state_ok=_state_ok(status),
            # Built in C (compress), not a Python loop: an EngineImage event carries every node.
            ready_nodes=ready_nodes,
            ready_numbers=frozenset(map(node_id, ready_nodes)),
            controller_api_version=status.controller_api_version,
            controller_api_min_version=status.controller_api_min_version,
            usable=_usable(ei),
            deployment=status.node_deployment_map,
            namespace=_intern(ei.metadata.namespace),
            uid=ei.metadata.uid,
            paused=ei.metadata.annotations.get(WAVE_PAUSED, ""),
            resumed=ei.metadata.annotations.get(WAVE_RESUMED, ""),
            deployed=status.state == "deployed",
        )

    def holds_facts_of(self, ei: AnyEngineImage) -> bool:
        """`ei` says exactly what this record holds (typically only its refCount moved, as it does
        with every upgrade). The node map is compared with the one the record was built from (raw
        JSON bytes, or dicts, compared in C); only when they differ are the ready nodes compared:
        equal when there are as many and each is already in ours. Raises as `from_object`."""
        status = ei.status
        if not (
            self.image == ei.spec.image
            and self.state_ok == _state_ok(status)
            and self.controller_api_version == status.controller_api_version
            and self.controller_api_min_version == status.controller_api_min_version
            and self.usable == _usable(ei)
            and self.paused == ei.metadata.annotations.get(WAVE_PAUSED, "")
            and self.resumed == ei.metadata.annotations.get(WAVE_RESUMED, "")
            and self.deployed == (status.state == "deployed")
        ):
            return False
        deployment = status.node_deployment_map
        if deployment is self.deployment or deployment == self.deployment:
            return True
        nodes = node_map(deployment)
        return countOf(nodes.values(), True) == len(self.ready_nodes) and self.ready_nodes.issuperset(
            compress(nodes, nodes.values())
        )


def _state_ok(status: lh.EngineImageStatus | DeploymentStatus) -> bool:
    """§1.3: an image `deployed` or `deploying` counts as ready where its nodes say so."""
    return status.state in ("deployed", "deploying")


def _usable(ei: AnyEngineImage) -> bool:
    return not ei.status.incompatible and ei.metadata.deletion_timestamp is None
