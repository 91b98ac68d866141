"""The explorer's safety rules, judged inside the API server at every write (admission hooks that
never refuse anything, as the scenario observers do), so a fault cannot hide a bad write between
two polls:

* never a busy v1 instance manager's pod deleted (its status, or an engine or replica, shows an
  instance running or starting in it: the im-restart scenarios' `busy_instances`);
* never a node's v2 instance manager deleted (v2-upgrade's step), nor an instance manager's pod
  deleted (im-restart's restart), while the node is NotReady;
* no attached volume detached while it is still asked onto its node (an operator's detach clears
  `spec.nodeID` first; a NotReady node or an IM pod the cell crashed is not corral's doing);
* the per-node engine-upgrade limit never exceeded by a volume starting its upgrade: the limit of
  the service's mode (`effective_limit`), as it stood when the decision could have been taken;
* nothing written twice: no command applied twice (LH_RESULTS, judged when the cell ends).

The v2-upgrade rules (one node in flight, named by its manager; no attached v2 volume detached;
v1 untouched) are the v2 scenarios' own `UpgradeInvariants`, registered by that service's spec.
Deletes the cell makes itself (a crash it injects) are declared with `expect_delete`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec
from nats.js.api import ConsumerConfig, DeliverPolicy

from corral_bus import Bus
from corral_decision import Mode
from corral_model.envelopes import CommandResult, Outcome
from corral_model.subjects import RESULTS_PREFIX, RESULTS_STREAM
from tests.fixtures.sandbox import Sandbox
from tests.scenarios.im_restart.scenario import busy_instances

if TYPE_CHECKING:
    from tests.explore.services import Explored

Obj = dict[str, Any]
LONGHORN = "longhorn.io"
IM_COMPONENT = "instance-manager"
_result = msgspec.json.Decoder(CommandResult)


def _status(obj: Obj | None) -> Obj:
    return (obj or {}).get("status") or {}


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def own_limit(decider_settings: dict[str, Any]) -> int | None:
    """corral's own per-node limit when the explored decider runs in a mode other than `replace`
    (engine-upgrade's `per_node_limit`, default 1); None in `replace`, where Longhorn's setting is
    the limit (corral_engine_upgrade.service.EngineUpgradeConfig.decider_config)."""
    if Mode(decider_settings.get("mode", Mode.REPLACE)) is Mode.REPLACE:
        return None
    return int(decider_settings.get("per_node_limit", 1))


def _as_limit(setting: Obj | None) -> int:
    """A limit setting's value as Longhorn reads it (not an integer: 0, disabled)."""
    try:
        return int(str((setting or {}).get("value", "0")))
    except ValueError:
        return 0


def in_flight(volume: Obj | None) -> bool:
    """Longhorn's engine upgrade in progress: spec.image differs from status.currentImage."""
    image = _spec(volume).get("image", "")
    current = _status(volume).get("currentImage", "")
    return bool(image and current and image != current)


class Safety:
    def __init__(self, sandbox: Sandbox, spec: Explored) -> None:
        self.sandbox = sandbox
        self.namespace = sandbox.namespace
        self.limit_setting = spec.limit_setting
        self.own_limit = own_limit(spec.decider_settings)
        self._limit_history: list[tuple[int, int]] = []
        """(writes counted when it changed, the value it had until then) of the limit setting."""
        self._last_write: dict[str, int] = {}
        """Per volume, the write count at its last write."""
        self.violations: list[str] = []
        self.writes = 0
        self.judging = False
        """Off while the sandbox settles its seed (the simulator replaces seeded pods as it starts);
        the cell turns it on once the cluster is settled, before the service is given its work."""
        self.released: set[str] = set()
        """Volumes the cell itself detached or deleted: their detach is the cell's, not corral's
        (Longhorn finishes a detach even when the volume is asked back at once)."""
        self._expected: set[tuple[str, str]] = set()
        self.pod_deletes: list[str] = []
        """Every command LH_RESULTS shows applied to a pod (service, pod), after `applied_twice`."""
        self.crashed_nodes: set[str] = set()
        """Nodes the cell disturbed (an IM pod crashed, the node NotReady): Longhorn itself may
        detach their volumes, as it does after a crash."""
        emulator = sandbox.emulator
        emulator.register_admission("", "pods", self._pod, name="explore.safety")
        emulator.register_admission(LONGHORN, "instancemanagers", self._im, name="explore.safety")
        emulator.register_admission(
            LONGHORN, "volumes", self._volume, name="explore.safety", include_status=True
        )
        if self.limit_setting and self.own_limit is None:
            emulator.register_admission(LONGHORN, "settings", self._setting, name="explore.safety")

    # --- what the cell tells the judge ---------------------------------------------------------------

    def expect_delete(self, plural: str, name: str, node: str = "") -> None:
        """The cell itself is about to delete this object (an injected crash): not judged."""
        self._expected.add((plural, name))
        if node:
            self.crashed_nodes.add(node)

    # --- reading the server's state at the instant of a write -----------------------------------------

    def _node_ready(self, node: str) -> bool:
        """Ready by the kubelet (the kube node) and by Longhorn (its node CR) alike."""
        for held in (
            self.sandbox.emulator.get("", "nodes", "", node),
            self.sandbox.emulator.get(LONGHORN, "nodes", self.namespace, node),
        ):
            if held is None:
                return False
            for condition in _status(held).get("conditions") or []:
                if condition.get("type") == "Ready" and condition.get("status") != "True":
                    return False
        return True

    def running_in(self, im: str) -> list[str]:
        found = []
        for plural in ("engines", "replicas"):
            for obj in self.sandbox.emulator.list(LONGHORN, plural, self.namespace):
                status = _status(obj)
                if status.get("instanceManagerName") == im and status.get("currentState") in (
                    "running",
                    "starting",
                ):
                    found.append(f"{plural[:-1]} {obj['metadata']['name']} {status['currentState']}")
        return found

    def _violation(self, what: str) -> None:
        self.violations.append(f"write {self.writes}: {what}")

    # --- the rules -----------------------------------------------------------------------------------

    def _pod(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        self.writes += 1
        if not self.judging or operation != "DELETE" or old is None:
            return
        meta = old.get("metadata", {})
        labels = meta.get("labels") or {}
        if labels.get("longhorn.io/component") != IM_COMPONENT or meta.get("deletionTimestamp"):
            return
        name = str(meta["name"])
        if ("pods", name) in self._expected:
            self._expected.discard(("pods", name))
            return
        im = self.sandbox.emulator.get(LONGHORN, "instancemanagers", self.namespace, name)
        busy = sorted({*busy_instances(im), *self.running_in(name)})
        # A v2 IM is replaced with its engines switched over (the v2 upgrade's very step, judged by
        # the v2 invariants); the rule is the v1 one, Longhorn's handlePod.
        # (An IM already gone had its delete judged then: this is its pod's garbage collection.)
        if busy and im is not None and _spec(im).get("dataEngine", "v1") == "v1":
            self._violation(f"pod of busy instance manager {name} deleted; busy: {busy}")
        node = str(_spec(old).get("nodeName") or _spec(im).get("nodeID") or "")
        if (
            node
            and im is not None
            and not im["metadata"].get("deletionTimestamp")
            and not self._node_ready(node)
        ):
            self._violation(f"pod of instance manager {name} deleted while its node {node} is NotReady")

    def _im(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        self.writes += 1
        if (
            not self.judging
            or operation != "DELETE"
            or old is None
            or old["metadata"].get("deletionTimestamp")
        ):
            return
        name = str(old["metadata"]["name"])
        if ("instancemanagers", name) in self._expected:
            self._expected.discard(("instancemanagers", name))
            return
        node = str(_spec(old).get("nodeID", ""))
        # v1 IMs are removed by Longhorn's own IM controller (an idle one on an old image, IM-08);
        # a v2 IM is deleted by v2-upgrade's upgrading-instance-manager step
        if _spec(old).get("dataEngine") == "v2" and node and not self._node_ready(node):
            self._violation(f"instance manager {name} deleted while its node {node} is NotReady")

    def _volume(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        self.writes += 1
        if new is None:
            return
        name = str(new["metadata"]["name"])
        try:
            if self.judging and old is not None:
                self._judge_volume(name, old, new)
        finally:
            self._last_write[name] = self.writes

    def _judge_volume(self, name: str, old: Obj, new: Obj) -> None:
        was, now = _status(old).get("state"), _status(new).get("state")
        node = str(_spec(new).get("nodeID") or "")
        if (
            was == "attached"
            and now in ("detaching", "detached")
            and node
            and node == _spec(old).get("nodeID")
            and self._node_ready(node)
            and node not in self.crashed_nodes
            and name not in self.released
        ):
            self._violation(f"attached volume {name} went {now} while still asked onto {node}")
        if self.limit_setting and in_flight(new) and not in_flight(old):
            self._judge_limit(name, new)

    def _judge_limit(self, name: str, new: Obj) -> None:
        owner = str(_status(new).get("ownerID") or _spec(new).get("nodeID") or "")
        limit = self.effective_limit(name)
        others = [
            v["metadata"]["name"]
            for v in self.sandbox.emulator.list(LONGHORN, "volumes", self.namespace)
            if v["metadata"]["name"] != name
            and in_flight(v)
            and str(_status(v).get("ownerID") or _spec(v).get("nodeID") or "") == owner
        ]
        if len(others) + 1 > limit:
            self._violation(
                f"volume {name} began its engine upgrade on {owner}, {others} in flight (limit {limit})"
            )

    def effective_limit(self, volume: str) -> int:
        """The per-node limit the service had to respect for this write.

        Outside mode `replace` it is corral's own (`per_node_limit`, CORRAL_PER_NODE_LIMIT): there
        Longhorn's setting only says whether Longhorn's own loop runs. In `replace` it is Longhorn's
        setting as the decision could have read it: the decision rests on the volume's state since
        its last write (its preconditions refuse it on any other), so any value the setting held
        since then is one it may have been taken under: Longhorn's own round reads the limit once
        and then updates its volumes (longhorn-behaviour.md §1.3, steps 3 and 6), and a change
        "takes effect at the next resync or other event" (§1.2)."""
        if self.own_limit is not None:
            return self.own_limit
        since = self._last_write.get(volume, 0)
        held = [value for changed, value in self._limit_history if changed >= since]
        return max([self._limit(), *held])

    def _setting(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        if old is None or new is None or new["metadata"]["name"] != self.limit_setting:
            return
        before, after = _as_limit(old), _as_limit(new)
        if before != after:
            self._limit_history.append((self.writes, before))

    def _limit(self) -> int:
        setting = self.sandbox.emulator.get(LONGHORN, "settings", self.namespace, self.limit_setting)
        return _as_limit(setting)

    # --- nothing written twice -----------------------------------------------------------------------

    async def applied_twice(self, bus: Bus) -> list[str]:
        """Every command LH_RESULTS shows applied more than once."""
        counts: Counter[str] = Counter()
        targets: dict[str, str] = {}
        info = await bus.js.stream_info(RESULTS_STREAM)
        total = int(info.state.messages)
        if not total:
            return []
        psub = await bus.js.pull_subscribe(
            f"{RESULTS_PREFIX}.>",
            stream=RESULTS_STREAM,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=5.0),
        )
        seen = 0
        try:
            while seen < total:
                batch = await psub.fetch(min(256, total - seen), timeout=5)
                for msg in batch:
                    seen += 1
                    with contextlib.suppress(msgspec.DecodeError):
                        result = _result.decode(msg.data)
                        if result.outcome is Outcome.APPLIED and not result.dry_run:
                            counts[result.command_id] += 1
                            targets[result.command_id] = f"{result.target.kind}/{result.target.name}"
                            if result.target.kind.lower() == "pod":
                                self.pod_deletes.append(f"{result.service}: {result.target.name}")
                    await msg.ack()
        finally:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()
        return [f"command {c} on {targets[c]} applied {n} times" for c, n in counts.items() if n > 1]
