"""`/_sandbox/simulator/…`: the Longhorn simulator's faults, reachable from another process.

A chaos test or an operator holds no Python handle on a sandbox started with `corral sandbox up`, only
its URL (in the kubeconfig). The emulator's control surface already covers the API server's faults
(`/_sandbox/faults`, `/_sandbox/compact`); SandboxCluster mounts this one beside it for the data
plane's (`SimFaults`):

| method and path | body | what |
|---|---|---|
| `GET /_sandbox/simulator` | | the faults held now (`SimFaults.state()`) |
| `POST …/stall`, `…/resume` | `{"controllers": [...]}` (none: all) | stop / restart simulated controllers |
| `POST …/restart` | | a controller restart: in-memory progress lost |
| `POST …/crash-engine` | `{"volume": V}` | kill the volume's engine process |
| `POST …/fail-replica` | `{"replica": R}` | the replica's process errors |
| `POST …/node-ready` | `{"node": N, "ready": false}` | node NotReady (or Ready again) |
| `POST …/slow-writes` | `{"seconds": S}` | every simulator write waits S first |
| `POST …/restart-im-container` | `{"pod": P}` | an instance-manager container restart |
| `POST …/fail-im-pod` | `{"pod": P}` | an instance-manager pod's container exits (phase Failed) |
| `POST …/hold-instance`, `…/release-instance` | `{"instance": I}` | hold an instance `starting` / free it |
| `GET …/instance-managers` | | per IM: node, state, pod (uid, phase, restartCount), every pod uid |
| `POST …/block-target`, `…/unblock-target` | `{"node": N}` | no v2 target created on N (stalled) |
| `POST …/kill-v2-im`, `…/revive-v2-im` | `{"node": N}` | N's v2 IM pod dies and stays down / back |
| `POST …/node-images` | `{"node": N, "add": [...], "remove": [...]}` | the kube node's pulled images |
| `GET …/io` | | the SIM-IO ledger (also at `GET /_sandbox/io`, `IOControl`) |
| `POST …/clear` | | undo every fault held here |

Every answer is the state after the change; a name that does not exist is a 404, a bad body a 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from corral_sandbox.emulator import errors
from corral_sandbox.emulator.errors import ApiError
from corral_sandbox.emulator.http import Handled, Reply
from corral_sandbox.emulator.store import encode
from corral_sandbox.simulator.faults import SimFaults
from corral_sandbox.simulator.im_ledger import instance_manager_pods
from corral_sandbox.simulator.io_ledger import io_report
from corral_sandbox.simulator.objects import engine_name
from corral_sandbox.simulator.reconcile import CONTROLLERS

if TYPE_CHECKING:
    from corral_sandbox.simulator.runner import Simulator

MOUNT = "simulator"


def not_found(what: str) -> ApiError:
    return ApiError(404, "NotFound", f"{what} not found")


def _text(body: Any, field: str) -> str:
    value = body.get(field) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise errors.bad_request(f"expected a JSON object with a non-empty string {field!r}")
    return value


def _controllers(body: Any) -> tuple[str, ...]:
    names = body.get("controllers", []) if isinstance(body, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise errors.bad_request("controllers: expected a list of controller names")
    unknown = sorted(set(names) - set(CONTROLLERS))
    if unknown:
        raise errors.bad_request(f"unknown controllers {unknown}; known: {sorted(CONTROLLERS)}")
    return tuple(names)


class SimulatorControl:
    """The `/_sandbox/simulator` mount: HTTP onto one Simulator's SimFaults."""

    def __init__(self, simulator: Simulator) -> None:
        self._sim = simulator
        self._actions: dict[str, Callable[[Any], Awaitable[None] | None]] = {
            "stall": lambda body: self._faults.stall(*_controllers(body)),
            "resume": lambda body: self._faults.resume(*_controllers(body)),
            "restart": lambda body: self._faults.restart(),
            "crash-engine": self._crash_engine,
            "fail-replica": self._fail_replica,
            "node-ready": self._node_ready,
            "slow-writes": self._slow_writes,
            "restart-im-container": self._restart_im_container,
            "fail-im-pod": self._fail_im_pod,
            "hold-instance": lambda body: self._faults.hold_instance(_text(body, "instance")),
            "release-instance": lambda body: self._faults.release_instance(_text(body, "instance")),
            "block-target": lambda body: self._on_node(body, self._faults.block_target),
            "unblock-target": lambda body: self._on_node(body, self._faults.unblock_target),
            "kill-v2-im": lambda body: self._on_node(body, self._faults.kill_v2_instance_manager),
            "revive-v2-im": lambda body: self._on_node(body, self._faults.revive_v2_instance_manager),
            "node-images": self._node_images,
            "clear": lambda body: self._faults.clear(),
        }

    @property
    def _faults(self) -> SimFaults:
        return self._sim.faults

    def __call__(self, method: str, path: str, body: Any) -> Handled:
        if not path and method == "GET":
            return self._state()
        if path == "instance-managers" and method == "GET":
            return Reply(encode(instance_manager_pods(self._sim.view, self._sim.memory)))
        if path == "io" and method == "GET":
            return Reply(encode(io_report(self._sim.memory, self._sim.clock.now())))
        action = self._actions.get(path)
        if action is None or method != "POST":
            raise errors.page_not_found(f"/_sandbox/{MOUNT}/{path}")
        outcome = action(body)
        if outcome is None:
            return self._state()
        return self._after(outcome)

    async def _after(self, outcome: Awaitable[None]) -> Reply:
        try:
            await outcome
        except KeyError as error:
            raise not_found(str(error.args[0]) if error.args else "object") from None
        return self._state()

    def _state(self) -> Reply:
        return Reply(encode(self._faults.state()))

    def _crash_engine(self, body: Any) -> None:
        volume = _text(body, "volume")
        if self._sim.view.get("engine", engine_name(volume)) is None:
            raise not_found(f"engine of volume {volume}")
        self._faults.crash_engine(volume)

    def _fail_replica(self, body: Any) -> None:
        replica = _text(body, "replica")
        if self._sim.view.get("replica", replica) is None:
            raise not_found(f"replica {replica}")
        self._faults.fail_replica(replica)

    def _node_ready(self, body: Any) -> Coroutine[Any, Any, None]:
        node = _text(body, "node")
        ready = body.get("ready")
        if not isinstance(ready, bool):
            raise errors.bad_request("ready: expected true or false")
        return self._faults.set_node_ready(node, ready)

    def _slow_writes(self, body: Any) -> None:
        seconds = body.get("seconds") if isinstance(body, dict) else None
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise errors.bad_request("seconds: expected a number >= 0")
        self._faults.slow_writes(float(seconds))

    def _on_node(self, body: Any, fault: Callable[[str], None]) -> None:
        node = _text(body, "node")
        try:
            fault(node)
        except KeyError:
            raise not_found(f"node {node}") from None

    def _node_images(self, body: Any) -> Coroutine[Any, Any, None]:
        node = _text(body, "node")
        lists = {key: body.get(key, []) for key in ("add", "remove")}
        if not all(isinstance(v, list) and all(isinstance(i, str) and i for i in v) for v in lists.values()):
            raise errors.bad_request("add, remove: expected lists of image names")

        async def change() -> None:
            await self._faults.set_node_images(node, add=lists["add"], remove=lists["remove"])

        return change()

    def _fail_im_pod(self, body: Any) -> None:
        pod = _text(body, "pod")
        try:
            self._faults.fail_instance_manager_pod(pod)
        except KeyError:
            raise not_found(f"pod {pod}") from None

    def _restart_im_container(self, body: Any) -> None:
        pod = _text(body, "pod")
        try:
            self._faults.restart_instance_manager_container(pod)
        except KeyError:
            raise not_found(f"pod {pod}") from None


IO_MOUNT = "io"


class IOControl:
    """The `/_sandbox/io` mount: `GET` answers the SIM-IO ledger (io_ledger.py), read-only."""

    def __init__(self, simulator: Simulator) -> None:
        self._sim = simulator

    def __call__(self, method: str, path: str, body: Any) -> Handled:
        if method != "GET" or path:
            raise errors.page_not_found(f"/_sandbox/{IO_MOUNT}/{path}")
        return Reply(encode(io_report(self._sim.memory, self._sim.clock.now())))
