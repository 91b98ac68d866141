"""`Emulator`: the Python handle on the sandbox's Kubernetes API server.

Tests start one in-process on a free port; benchmarks run it as its own process
(`python -m corral_sandbox.emulator`). Either way clients only ever see HTTP and a kubeconfig; the
methods here (`get`, `list`, `write_log`, `faults`, `compact`, admission hooks) are for the tests'
oracles and for the simulator's webhooks, never a way around the API for the code under test.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corral_sandbox.emulator import control
from corral_sandbox.emulator.admission import MutatingHook, Mutator, ValidatingHook, Validator
from corral_sandbox.emulator.crds import default_crd_dir, read_crds
from corral_sandbox.emulator.faults import Faults
from corral_sandbox.emulator.http import HttpServer
from corral_sandbox.emulator.kubeconfig import write_kubeconfig
from corral_sandbox.emulator.resources import CRD_GROUP, ResourceType
from corral_sandbox.emulator.selectors import parse_field_selector, parse_label_selector
from corral_sandbox.emulator.server import ApiServer
from corral_sandbox.emulator.store import Store, decode
from corral_sandbox.emulator.watch import WatchState
from corral_sandbox.emulator.writelog import WriteLog

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "longhorn-system")


class Emulator:
    def __init__(
        self,
        *,
        history_size: int = 10_000,
        crd_dir: str | os.PathLike[str] | None = None,
        install_crds: bool = True,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        bookmark_interval_s: float = 1.0,
        first_bookmark_s: float = 0.05,
        fault_seed: int = 0,
        write_log_size: int = 200_000,
    ) -> None:
        self.faults = Faults(seed=fault_seed)
        self.write_log = WriteLog(write_log_size)
        self.store = Store(history_size=history_size, write_log=self.write_log)
        self._watch_state = WatchState(self.faults, bookmark_interval_s, first_bookmark_s)
        self._api = ApiServer(self.store, self.faults, self._watch_state)
        # extra `/_sandbox/<name>/…` endpoints (see mount_control)
        self.control_mounts: dict[str, control.ControlMount] = {}
        self._api.control = control.handler(self)
        self._http: HttpServer | None = None
        self.url = ""
        self.port = 0
        self.kubeconfig_path: Path | None = None
        for ns in namespaces:
            self.store.create(self._type("", "namespaces"), "", {"metadata": {"name": ns}})
        if install_crds:
            directory = Path(crd_dir) if crd_dir is not None else default_crd_dir()
            if directory is None:
                raise FileNotFoundError("no deploy/crds directory found; pass crd_dir= or set CORRAL_CRD_DIR")
            self.install_crds(directory)

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 = a free port); returns the base URL."""
        self._http = HttpServer(self._api.handle)
        self.port = await self._http.start(host, port)
        self.url = f"http://{host}:{self.port}"
        self._api.server_address = f"{host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        """End every open watch, then close the server."""
        self._watch_state.stopping = True
        for coll in self.store.collections.values():
            coll.history.wake()
        if self._http is not None:
            await self._http.stop()
            self._http = None
        await asyncio.sleep(0)

    async def __aenter__(self) -> Emulator:
        if not self.url:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: str | os.PathLike[str], namespace: str = "longhorn-system") -> Path:
        if not self.url:
            raise RuntimeError("start the emulator before writing its kubeconfig")
        self.kubeconfig_path = write_kubeconfig(path, self.url, namespace)
        return self.kubeconfig_path

    # --- set-up ---------------------------------------------------------------------------------------

    def install_crds(self, directory: str | os.PathLike[str]) -> list[str]:
        """Create (or replace) every CRD found in the directory's YAML files; returns their names."""
        crd_type = self._type(CRD_GROUP, "customresourcedefinitions")
        names = []
        for crd in read_crds(Path(directory)):
            self.store.load(crd_type, [crd])
            names.append(crd["metadata"]["name"])
        return names

    def register_admission(
        self,
        group: str,
        plural: str,
        fn: Validator,
        *,
        name: str = "",
        code: int = 400,
        include_status: bool = False,
    ) -> None:
        """A validating webhook: `fn(operation, old, new)` returns a denial message or None.

        A denial answers `code` (400 like a webhook without its own code, or 422), or the code `fn`
        returns with the message as `(code, message)`, with the message
        `admission webhook "<name>" denied the request: <msg>`. Hooks must not modify their arguments.
        """
        hook = ValidatingHook(fn, name or f"validator.{group or 'core'}", code, include_status)
        self.store.admission.add_validating(group, plural, hook)

    def register_mutation(
        self, group: str, plural: str, fn: Mutator, *, name: str = "", include_status: bool = False
    ) -> None:
        """A mutating webhook: `fn(operation, old, new)` returns the object to store (or None = as is)."""
        self.store.admission.add_mutating(
            group, plural, MutatingHook(fn, name or f"mutator.{group or 'core'}", include_status)
        )

    def mount_control(self, name: str, mount: control.ControlMount) -> None:
        """Serve `/_sandbox/<name>/…` with `mount(method, path below it, JSON body)`, which answers with
        a Reply now or a coroutine (raise `errors.ApiError` to refuse): how the sandbox exposes the
        Longhorn simulator's faults on the API server's own control surface."""
        if name in ("faults", "compact", "writes", "load", "stats"):
            raise ValueError(f"/_sandbox/{name} is the emulator's own")
        self.control_mounts[name] = mount

    # --- oracles (tests read the truth here, never to feed the code under test) -----------------------

    def _type(self, group: str, plural: str) -> ResourceType:
        rt = self.store.resource_any_version(group, plural)
        if rt is None:
            raise KeyError(f"no resource {plural}.{group}" if group else f"no resource {plural}")
        return rt

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        coll = self.store.collections.get((group, plural))
        if coll is None:
            return None
        entry = coll.objects.get((namespace if coll.rt.namespaced else "", name))
        return None if entry is None else dict(decode(entry.raw))

    def list(
        self,
        group: str,
        plural: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        items, _, _, _ = self.store.select(
            self._type(group, plural),
            namespace,
            parse_label_selector(label_selector),
            parse_field_selector(field_selector),
        )
        return [decode(raw) for raw in items]

    def load(self, group: str, plural: str, objects: Iterable[dict[str, Any]]) -> int:
        """Create or replace objects exactly as given (status included, no admission): seeding only."""
        return self.store.load(self._type(group, plural), objects)

    def compact(self) -> int:
        """Forget the watch history: a watch from any older resourceVersion now gets 410 Gone."""
        return self.store.compact()

    def stats(self) -> dict[str, Any]:
        return {
            "resourceVersion": str(self.store.rv),
            "objects": {
                (f"{g}/{p}" if g else p): len(c.objects)
                for (g, p), c in self.store.collections.items()
                if c.objects
            },
            "watches": self._watch_state.active,
            "watchEventsSent": self._watch_state.events_sent,
            "writes": self.write_log.total,
        }
