"""The HTTP face Kubernetes and Prometheus see: `/livez`, `/readyz` and `/metrics`.

Readiness is the conjunction of named conditions the service declares (`nats`, `bootstrap`, ...), so
`/readyz` can say which one is still missing instead of a bare 503. Liveness only proves the event
loop still answers; a service that lost NATS is unready, not dead, because restarting it would not
bring NATS back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class Readiness:
    """Named conditions that must all hold before the service takes traffic.

    A condition is either marked (`mark("bootstrap")` once the view is built) or probed: a callable
    asked at every check, for states that come and go on their own, like the NATS connection.
    """

    def __init__(self, *required: str) -> None:
        self._conditions: dict[str, bool] = dict.fromkeys(required, False)
        self._probes: dict[str, Callable[[], bool]] = {}
        self._marked = asyncio.Event()

    def require(self, *names: str) -> None:
        """Declare conditions that start unmet; declaring an existing one leaves it as it is."""
        for name in names:
            self._conditions.setdefault(name, False)

    def mark(self, name: str, met: bool = True) -> None:
        """Record whether `name` holds now (declaring it if it was not)."""
        self._probes.pop(name, None)
        self._conditions[name] = met
        self._marked.set()

    def probe(self, name: str, check: Callable[[], bool]) -> None:
        """Make `name` hold exactly while `check()` returns true."""
        self._conditions.pop(name, None)
        self._probes[name] = check

    async def wait_marked(self) -> None:
        """Return once every marked condition holds (probes are not waited for: they come and go)."""
        while not all(self._conditions.values()):
            self._marked.clear()
            await self._marked.wait()

    def snapshot(self) -> dict[str, bool]:
        """Every condition and whether it holds now."""
        state = dict(self._conditions)
        for name, check in self._probes.items():
            try:
                state[name] = bool(check())
            except Exception:  # a failing probe means "not ready", never a failing /readyz
                state[name] = False
        return state

    @property
    def ready(self) -> bool:
        return all(self.snapshot().values())

    def pending(self) -> list[str]:
        return sorted(name for name, met in self.snapshot().items() if not met)


class HealthServer:
    """A small aiohttp server for probes and scrapes; `port` is the bound one (useful with port 0)."""

    def __init__(
        self, readiness: Readiness, registry: CollectorRegistry, host: str = "0.0.0.0", port: int = 8080
    ) -> None:
        self.readiness = readiness
        self.registry = registry
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        bound = self._runner.addresses[0]
        self.port = int(bound[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _livez(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        conditions = self.readiness.snapshot()
        ready = all(conditions.values())
        body = json.dumps({"ready": ready, "conditions": conditions}, sort_keys=True)
        status = 200 if ready else 503
        return web.Response(text=body + "\n", status=status, content_type="application/json")

    async def _metrics(self, _request: web.Request) -> web.Response:
        # generate_latest walks every collector; cheap at corral's metric counts, so no thread hop.
        payload = generate_latest(self.registry)
        return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})
