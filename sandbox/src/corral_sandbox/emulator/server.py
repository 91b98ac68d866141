"""The HTTP face of the emulator: Kubernetes REST paths onto the generic store, plus `/_sandbox` control.

It is an aiohttp low-level server (no router, no middlewares): the path is split once and dispatched by
hand, which keeps a patch round trip to a few tens of microseconds of server time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from aiohttp import web

from corral_sandbox.emulator import discovery, errors
from corral_sandbox.emulator.errors import ApiError
from corral_sandbox.emulator.faults import Faults
from corral_sandbox.emulator.resources import ResourceType
from corral_sandbox.emulator.selectors import parse_field_selector, parse_label_selector
from corral_sandbox.emulator.store import Store, decode, encode
from corral_sandbox.emulator.watch import WatchRequest, WatchState, serve

log = logging.getLogger(__name__)

_JSON_HEADERS = {"Content-Type": "application/json"}
_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
}
_TRUE = ("1", "true", "True")


def _json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=body, status=status, headers={**headers, **_JSON_HEADERS} if headers else _JSON_HEADERS
    )


def _flag(query: Any, name: str) -> bool:
    return query.get(name, "") in _TRUE


def _dry_run(query: Any, body: Any = None) -> bool:
    values = query.getall("dryRun", [])
    if isinstance(body, dict) and isinstance(body.get("dryRun"), list):
        values = [*values, *body["dryRun"]]
    for v in values:
        if v != "All":
            raise errors.bad_request(f'Invalid value: "{v}": supported values: "All"')
    return bool(values)


async def _body(request: web.BaseRequest) -> Any:
    raw = await request.read()
    if not raw:
        return None
    try:
        return decode(raw)
    except msgspec.DecodeError as e:
        raise errors.bad_request(f"couldn't decode the request body: {e}") from None


class ApiServer:
    def __init__(self, store: Store, faults: Faults, watch_state: WatchState) -> None:
        self.store = store
        self.faults = faults
        self.watch_state = watch_state
        self.server_address = ""
        self.control: Any = None  # the /_sandbox handler, set by the Emulator

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        try:
            if path.startswith("/api"):
                if self.faults.latency_s:
                    await asyncio.sleep(self.faults.latency_s)
                return await self._api(request, path)
            if path.startswith("/_sandbox") and self.control is not None:
                response: web.StreamResponse = await self.control(request)
                return response
            if path.rstrip("/") == "/version":
                return _json_response(encode(discovery.KUBE_VERSION))
            if path in ("/healthz", "/livez", "/readyz"):
                return web.Response(text="ok")
            raise errors.page_not_found(path)
        except ApiError as e:
            return _json_response(e.body(), e.code, e.headers)
        except Exception as e:  # a bug must answer 500, never take the server down
            log.exception("request %s %s failed", request.method, path)
            err = errors.internal_error(f"{type(e).__name__}: {e}")
            return _json_response(err.body(), 500)

    # --- routing ----------------------------------------------------------------------------------

    def _types(self) -> list[ResourceType]:
        return list(self.store.types.values())

    async def _api(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            if len(parts) == 1:
                return _json_response(encode(discovery.api_versions(self.server_address)))
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return _json_response(encode(discovery.api_group_list(self._types())))
            if len(parts) == 2:
                doc = discovery.api_group(self._types(), parts[1])
                if doc is None:
                    raise errors.page_not_found(path)
                return _json_response(encode(doc))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.page_not_found(path)
        if not rest:
            doc = discovery.resource_list(self._types(), group, version)
            if doc is None:
                raise errors.page_not_found(path)
            return _json_response(encode(doc))
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = self.store.resource(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.page_not_found(path)
        rt = self.store.resource(group, version, rest[0])
        if rt is None or (namespace is not None and not rt.namespaced):
            raise errors.page_not_found(path)
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and (subresource != "status" or not rt.status_subresource):
            raise errors.page_not_found(path)
        query = request.query
        method = request.method
        if name is None:
            if method == "GET":
                if watch_path or _flag(query, "watch"):
                    return await self._watch(request, rt, namespace, query)
                return self._list(rt, namespace, query)
            if method == "POST":
                return await self._create(request, rt, namespace or "", query)
            if method == "DELETE":
                return await self._delete_collection(request, rt, namespace, query)
            raise errors.method_not_allowed()
        if watch_path:
            return await self._watch(request, rt, namespace, query, name=name)
        ns = namespace or ""
        if method == "GET":
            return _json_response(self.store.get_raw(rt, ns, name))
        if method in ("PUT", "PATCH", "DELETE"):
            return await self._write(request, rt, ns, name, subresource, query)
        raise errors.method_not_allowed()

    # --- reads ------------------------------------------------------------------------------------

    def _list(self, rt: ResourceType, namespace: str | None, query: Any) -> web.Response:
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise errors.bad_request(f"invalid limit: {query.get('limit')!r}") from None
        items, rv, token, remaining = self.store.select(
            rt,
            namespace,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector")),
            limit=max(0, limit),
            continue_token=query.get("continue", ""),
        )
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        body = b"".join(
            (
                b'{"apiVersion":',
                encode(rt.api_version),
                b',"kind":',
                encode(rt.kind + "List"),
                b',"metadata":',
                encode(meta),
                b',"items":[',
                b",".join(items),
                b"]}",
            )
        )
        return _json_response(body)

    async def _watch(
        self,
        request: web.BaseRequest,
        rt: ResourceType,
        namespace: str | None,
        query: Any,
        name: str | None = None,
    ) -> web.StreamResponse:
        field_text = query.get("fieldSelector") or ""
        if name is not None:
            field_text = f"metadata.name={name}" + (f",{field_text}" if field_text else "")
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError:
                raise errors.bad_request(f"invalid timeoutSeconds: {query['timeoutSeconds']!r}") from None
        send_initial = query.get("sendInitialEvents")
        req = WatchRequest(
            rt=rt,
            namespace=namespace,
            labels=parse_label_selector(query.get("labelSelector")),
            fields=parse_field_selector(field_text),
            resource_version=query.get("resourceVersion", ""),
            send_initial_events=None if send_initial is None else send_initial in _TRUE,
            bookmarks=_flag(query, "allowWatchBookmarks"),
            timeout_s=timeout,
        )
        return await serve(request, self.store, self.watch_state, req)

    # --- writes -----------------------------------------------------------------------------------

    async def _before_write(self, rt: ResourceType, name: str) -> None:
        faults = self.faults
        if faults.write_latency_s:
            await asyncio.sleep(faults.write_latency_s)
        fault = faults.write_fault(rt, name)
        if fault is not None:
            raise fault

    async def _create(
        self, request: web.BaseRequest, rt: ResourceType, namespace: str, query: Any
    ) -> web.Response:
        body = await _body(request)
        dry_run = _dry_run(query)
        name = ""
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            name = str(body["metadata"].get("name") or "")
        await self._before_write(rt, name)
        obj = self.store.create(rt, namespace, body, dry_run=dry_run)
        return _json_response(encode(obj), 201)

    async def _write(
        self,
        request: web.BaseRequest,
        rt: ResourceType,
        namespace: str,
        name: str,
        subresource: str,
        query: Any,
    ) -> web.Response:
        method = request.method
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            patch_type = _PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise errors.unsupported_media_type(content_type)
            raw = await request.read()
            dry_run = _dry_run(query)
            await self._before_write(rt, name)
            obj = self.store.patch(
                rt, namespace, name, patch_type, raw, subresource=subresource, dry_run=dry_run
            )
            return _json_response(encode(obj))
        body = await _body(request)
        dry_run = _dry_run(query, body if method == "DELETE" else None)
        await self._before_write(rt, name)
        if method == "PUT":
            obj = self.store.update(rt, namespace, name, body, subresource=subresource, dry_run=dry_run)
        else:
            if subresource:
                raise errors.method_not_allowed()
            obj = self.store.delete(rt, namespace, name, body, dry_run=dry_run)
        return _json_response(encode(obj))

    async def _delete_collection(
        self, request: web.BaseRequest, rt: ResourceType, namespace: str | None, query: Any
    ) -> web.Response:
        body = await _body(request)
        dry_run = _dry_run(query, body)
        items, _, _, _ = self.store.select(
            rt,
            namespace,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector")),
        )
        deleted: list[Any] = []
        for raw in items:
            meta = decode(raw)["metadata"]
            await self._before_write(rt, meta["name"])
            deleted.append(
                self.store.delete(rt, meta.get("namespace", ""), meta["name"], body, dry_run=dry_run)
            )
        doc = {
            "apiVersion": rt.api_version,
            "kind": rt.kind + "List",
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": deleted,
        }
        return _json_response(encode(doc))
