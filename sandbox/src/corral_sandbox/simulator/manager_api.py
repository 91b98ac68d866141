"""A small piece of longhorn-manager's REST API: what an operator uses for a manual engine upgrade.

* `POST /v1/volumes/{name}?action=engineUpgrade` with `{"image": "..."}` — judged by Longhorn's rules
  (engine_upgrade_api.py); when they pass, `spec.image` is set with an update through the Kubernetes
  API (so the volume webhook still applies, and a conflict re-runs the whole check, as Longhorn's
  `RetryOnConflictCause` does) and the volume comes back as Longhorn's API resource.
* `GET /v1/volumes/{name}` — that resource, to look at the result.

Errors come back as longhorn-manager's `HandleError` writes them: the status (404 for a not-found
cause, else 500) and a go-rancher error resource `{"type": "error", "status", "code", "message", …}`.
A route it does not have gets gorilla/mux's plain `404 page not found`.

The manager reads the cluster through the API server, like any client: one request is a handful of
GET/LISTs, taken fresh for every attempt. The sandbox serves this beside the simulator, which plays
the rest of longhorn-manager.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

from corral_sandbox.simulator.engine_upgrade_api import LONGHORN, EngineUpgradeRules, Refusal

log = logging.getLogger("corral_sandbox.manager_api")

Obj = dict[str, Any]
VERSION = "v1beta2"
# Longhorn's retry.DefaultRetry: five tries, ~10 ms apart
_CONFLICT_TRIES = 5
_CONFLICT_PAUSE = 0.01


class ClusterSnapshot:
    """What the rules read, fetched once per attempt: a `ClusterReader` over plain lists."""

    def __init__(self, objects: dict[str, list[Obj]]) -> None:
        self._objects = objects

    def list(
        self, group: str, plural: str, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[Obj]:
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return [
            obj
            for obj in self._objects.get(plural, [])
            if all(obj.get("metadata", {}).get("labels", {}).get(k) == v for k, v in wanted.items())
        ]

    def get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None:
        return next((o for o in self._objects.get(plural, []) if o["metadata"]["name"] == name), None)


class LonghornManagerAPI:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._namespace = namespace
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 = a free port); returns the base URL (`{url}/v1/volumes/...`)."""
        app = web.Application()
        app.router.add_post("/v1/volumes/{name}", self._volume_action)
        app.router.add_get("/v1/volumes/{name}", self._volume_get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- handlers --------------------------------------------------------------------------------

    async def _volume_action(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("action") != "engineUpgrade":
            return _no_route()
        name = request.match_info["name"]
        try:
            body = json.loads(await request.read() or b"{}")
            if not isinstance(body, dict):
                raise ValueError(f"expected a JSON object, got {type(body).__name__}")
            image = str(body.get("image", ""))
        except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            return _error(request, Refusal(500, f"failed to read engineUpgradeInput: {error}"))
        try:
            return await self._engine_upgrade(request, name, image)
        except client.ApiException as error:
            status = 404 if error.status == 404 else 500
            return _error(request, Refusal(status, _kube_message(error)))

    async def _engine_upgrade(self, request: web.Request, name: str, image: str) -> web.StreamResponse:
        for attempt in range(_CONFLICT_TRIES):
            snapshot = await self._snapshot(name)
            rules = EngineUpgradeRules(snapshot, self._namespace)
            refusal = rules.refusal(name, image)
            if refusal is not None:
                log.info("engine upgrade of %s to %s refused: %s", name, image, refusal.message)
                return _error(request, refusal)
            volume = rules.volume(name)
            assert volume is not None  # the rules refuse a missing volume
            volume["spec"]["image"] = image
            try:
                updated: Obj = await self._objects.replace_namespaced_custom_object(
                    LONGHORN, VERSION, self._namespace, "volumes", name, volume
                )
            except client.ApiException as error:
                wrapped = (
                    f"cannot upgrade engine for volume {name} using image {image}: {_kube_message(error)}"
                )
                if error.status == 409 and attempt + 1 < _CONFLICT_TRIES:
                    await asyncio.sleep(_CONFLICT_PAUSE)
                    continue
                return _error(request, Refusal(404 if error.status == 404 else 500, wrapped))
            log.info("upgrading volume %s engine image to %s", name, image)
            return web.json_response(self._resource(request, updated, snapshot))
        raise AssertionError("unreachable: the last attempt always answers")

    async def _volume_get(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        try:
            snapshot = await self._snapshot(name)
        except client.ApiException as error:
            return _error(request, Refusal(500, f"failed to get volume: {_kube_message(error)}"))
        volume = snapshot.get(LONGHORN, "volumes", self._namespace, name)
        if volume is None:
            return web.Response(status=404)  # responseWithVolume: a bare 404
        return web.json_response(self._resource(request, volume, snapshot))

    # --- reading the cluster ---------------------------------------------------------------------

    async def _snapshot(self, name: str) -> ClusterSnapshot:
        own = f"longhornvolume={name}"
        volume, settings, replicas, engines, images, nodes = await asyncio.gather(
            self._find("volumes", name),
            self._list("settings"),
            self._list("replicas", own),
            self._list("engines", own),
            self._list("engineimages"),
            self._list("nodes"),
        )
        return ClusterSnapshot(
            {
                "settings": settings,
                "volumes": [volume] if volume is not None else [],
                "replicas": replicas,
                "engines": engines,
                "engineimages": images,
                "nodes": nodes,
            }
        )

    async def _list(self, plural: str, label_selector: str = "") -> list[Obj]:
        answer = await self._objects.list_namespaced_custom_object(
            LONGHORN, VERSION, self._namespace, plural, label_selector=label_selector
        )
        items: list[Obj] = answer.get("items") or []
        return items

    async def _find(self, plural: str, name: str) -> Obj | None:
        try:
            obj: Obj = await self._objects.get_namespaced_custom_object(
                LONGHORN, VERSION, self._namespace, plural, name
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return obj

    def _resource(self, request: web.Request, volume: Obj, snapshot: ClusterSnapshot) -> Obj:
        name = volume["metadata"]["name"]
        self_link = f"{request.url.origin()}/v1/volumes/{name}"
        own = f"longhornvolume={name}"
        return volume_resource(
            volume,
            replicas=snapshot.list(LONGHORN, "replicas", label_selector=own),
            engines=snapshot.list(LONGHORN, "engines", label_selector=own),
            self_link=self_link,
        )


def volume_resource(volume: Obj, *, replicas: list[Obj], engines: list[Obj], self_link: str) -> Obj:
    """The fields of Longhorn's API `Volume` resource an engine upgrade concerns (api/model.go)."""
    spec, status = volume.get("spec", {}), volume.get("status", {})
    name = volume["metadata"]["name"]

    def instance(obj: Obj) -> Obj:
        ospec, ostatus = obj.get("spec", {}), obj.get("status", {})
        return {
            "name": obj["metadata"]["name"],
            "hostId": ospec.get("nodeID", ""),
            "image": ospec.get("image", ""),
            "currentImage": ostatus.get("currentImage", ""),
            "running": ostatus.get("currentState") == "running",
        }

    return {
        "id": name,
        "type": "volume",
        "links": {"self": self_link},
        "actions": {"engineUpgrade": f"{self_link}?action=engineUpgrade"},
        "name": name,
        "size": spec.get("size", ""),
        "numberOfReplicas": spec.get("numberOfReplicas", 0),
        "dataEngine": spec.get("dataEngine", "v1"),
        "dataLocality": spec.get("dataLocality", ""),
        "standby": bool(spec.get("Standby", False)),  # the CR's json tag is capitalised
        "image": spec.get("image", ""),
        "currentImage": status.get("currentImage", ""),
        "state": status.get("state", ""),
        "robustness": status.get("robustness", ""),
        "created": volume["metadata"].get("creationTimestamp", ""),
        "controllers": [instance(e) for e in sorted(engines, key=lambda o: o["metadata"]["name"])],
        "replicas": [instance(r) for r in sorted(replicas, key=lambda o: o["metadata"]["name"])],
    }


def _error(request: web.Request, refusal: Refusal) -> web.Response:
    """go-rancher's ServerApiError, as longhorn-manager's writeErr fills it."""
    body = {
        "type": "error",
        "links": {"self": str(request.url)},
        "actions": {},
        "status": refusal.status,
        "code": HTTPStatus(refusal.status).phrase,
        "message": refusal.message,
        "detail": "",
    }
    return web.json_response(body, status=refusal.status)


def _no_route() -> web.Response:
    return web.Response(status=404, text="404 page not found\n")


def _kube_message(error: client.ApiException) -> str:
    """What client-go's StatusError prints: the Status message (a webhook's denial, a conflict…)."""
    try:
        message = json.loads(error.body or b"{}").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return str(message or error.reason or error.status)
