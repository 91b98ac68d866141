"""Never a busy instance manager: held by the actuator on the instance manager itself, whoever asks.

Deleting an instance manager's pod (or the InstanceManager) while it runs an engine or a replica
takes that volume's data path down. im-restart and setting-sync only ask when they judged it idle,
but a command is judged on the sender's view, which lags: the issue-24 run saw a pod deleted 3 s
after its instance manager had begun starting a replica, and the issue-29 probe deleted a busy
InstanceManager with setting-sync's credentials and a busy pod (9 engines) with im-restart's.

So before such a delete the actuator reads the instance manager the pod belongs to (its
InstanceManager owner reference, else the pod's own name, as Longhorn does) and refuses, naming the
instances, when any engine, engine frontend or replica there is `running` or `starting`. The read is
the last request before the delete: the window left is one API round trip, not a debounce plus two
bus hops. setting-sync may further delete InstanceManagers only of a data engine that is disabled
(`v1-data-engine` / `v2-data-engine` false: Longhorn's own cleanup of a disabled engine).

v2-upgrade's delete of a node's old v2 instance manager is not held to "idle": its volumes stay
attached through targets moved to other nodes while their initiators still appear there. It is held
to the node instead: never while the instance manager's node is not Ready (the fault explorer's
v2-upgrade/node:upgrading-instance-manager/node-notready cell: the node went NotReady as the step
began, and the delete decided on a view that had not seen it yet was applied). So is an idle
instance manager's pod, whoever asks (the im-restart/idle and setting-sync/applying node-notready
cells: a pod delete decided on a Ready node landed after it went NotReady).
"""

from __future__ import annotations

from typing import Any

from corral_actuator.api import KubeApi
from corral_actuator.related import entries_in_states
from corral_actuator.settings import SettingValues
from corral_kube.patching import resolve
from corral_model.envelopes import Command, Verb
from corral_model.kinds import KINDS

IM_COMPONENT = "instance-manager"
ACTIVE_STATES = frozenset({"running", "starting"})
INSTANCE_MAPS = ("instanceEngines", "instanceEngineFrontends", "instanceReplicas", "instances")
# The services whose instance-manager deletes must find it idle (v2-upgrade's is its own step).
HELD_SERVICES = frozenset({"im-restart", "setting-sync"})
NODE_HELD_SERVICES = frozenset({"v2-upgrade"})
_IM = KINDS["instancemanager"]
_NODE = KINDS["node"]


def owning_instance_manager(pod: dict[str, Any]) -> str:
    """The InstanceManager a pod belongs to: its owner reference, else its own name (Longhorn's rule)."""
    owners = resolve(pod, "/metadata/ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, dict) and owner.get("kind") == "InstanceManager" and owner.get("name"):
            return str(owner["name"])
    name = resolve(pod, "/metadata/name")
    return name if isinstance(name, str) else ""


def busy_instances(im: dict[str, Any]) -> list[str]:
    """Its instances that are running or starting, by name."""
    return sorted(
        {
            name
            for field in INSTANCE_MAPS
            for name, _ in entries_in_states(im, f"/status/{field}", "/status/state", ACTIVE_STATES)
        }
    )


def _busy_refusal(name: str, busy: list[str]) -> str:
    shown = ", ".join(busy[:5]) + (f" and {len(busy) - 5} more" if len(busy) > 5 else "")
    return f"never a busy instance manager: {name} has {len(busy)} instances running or starting ({shown})"


class InstanceManagerGuard:
    def __init__(self, api: KubeApi, settings: SettingValues) -> None:
        self._api = api
        self._settings = settings

    async def judge_delete(self, command: Command, document: dict[str, Any]) -> str | None:
        """The invariant this delete of `document` (as just read) would break, or None."""
        if command.verb is not Verb.DELETE:
            return None
        kind = command.target.kind
        if command.service in NODE_HELD_SERVICES and kind == _IM.kind:
            return await self._node_ready_or_why(command.target.namespace, document)
        if command.service not in HELD_SERVICES:
            return None
        if kind == "Pod":
            if resolve(document, "/metadata/labels/longhorn.io~1component") != IM_COMPONENT:
                return None
            name = owning_instance_manager(document)
            im = await self._read(command.target.namespace, name)
            if im is None:
                return None
            namespace = command.target.namespace
            return self._idle_or_why(name, im) or await self._node_ready_or_why(namespace, im, gone_ok=True)
        if kind == _IM.kind:
            refusal = self._idle_or_why(command.target.name, document)
            if refusal is None and command.service == "setting-sync":
                refusal = await self._engine_disabled_or_why(command, document)
            return refusal
        return None

    @staticmethod
    def _idle_or_why(name: str, im: dict[str, Any]) -> str | None:
        busy = busy_instances(im)
        return _busy_refusal(name, busy) if busy else None

    async def _engine_disabled_or_why(self, command: Command, im: dict[str, Any]) -> str | None:
        engine = resolve(im, "/spec/dataEngine")
        engine = engine if isinstance(engine, str) and engine else "v1"
        setting = f"{engine}-data-engine"
        value = await self._settings.value(command.target.namespace, setting, not_before=command.created_at)
        if (value or "").strip().lower() == "false":
            return None
        return (
            f"an instance manager is deleted only for a disabled data engine: {setting} is"
            f" {value if value is not None else 'not set'}"
        )

    async def _node_ready_or_why(
        self, namespace: str, im: dict[str, Any], gone_ok: bool = False
    ) -> str | None:
        """`gone_ok`: a pod's node that no longer exists holds nothing back (its pods are gone too)."""
        node = resolve(im, "/spec/nodeID")
        if not isinstance(node, str) or not node:
            return None
        found = await self._read(namespace, node, _NODE)
        if found is None and gone_ok:
            return None
        conditions = resolve(found, "/status/conditions") if found is not None else None
        ready = next(
            (c.get("status") for c in conditions or () if isinstance(c, dict) and c.get("type") == "Ready"),
            None,
        )
        if ready == "True":
            return None
        state = "gone" if found is None else f"Ready={ready or 'unknown'}"
        return f"never a node's instance manager deleted while the node is not Ready: {node} is {state}"

    async def _read(self, namespace: str, name: str, kind: Any = _IM) -> dict[str, Any] | None:
        """None: an orphan pod (nothing of Longhorn's runs in it), or a node gone."""
        return await self._api.read(kind.path(namespace, name), f"{kind.kind} {name}")
