"""The HTTP face of the emulator: Kubernetes REST paths onto the generic store, plus `/_sandbox` control.

Requests arrive from the lean HTTP layer (`http.py`); the path is split once and dispatched by hand.
Everything that can be answered at once is answered synchronously (no task, no coroutine); watches
and injected latency return a coroutine that the connection runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from corral_sandbox.emulator import discovery, errors
from corral_sandbox.emulator.errors import ApiError
from corral_sandbox.emulator.faults import Faults
from corral_sandbox.emulator.http import Handled, Query, Reply, Request
from corral_sandbox.emulator.resources import ResourceType
from corral_sandbox.emulator.selectors import parse_field_selector, parse_label_selector
from corral_sandbox.emulator.store import Store, decode, encode
from corral_sandbox.emulator.watch import WatchRequest, WatchState, serve

log = logging.getLogger(__name__)

_WRITES = frozenset(("POST", "PUT", "PATCH", "DELETE"))
_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
}
_TRUE = ("1", "true", "True")


def _json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(body, status, headers)


def _error_reply(e: ApiError) -> Reply:
    return Reply(e.body(), e.code, e.headers or None)


def _flag(query: Query, name: str) -> bool:
    return query.get(name, "") in _TRUE


def _dry_run(query: Query, body: Any = None) -> bool:
    values = query.getall("dryRun", [])
    if isinstance(body, dict) and isinstance(body.get("dryRun"), list):
        values = [*values, *body["dryRun"]]
    for v in values:
        if v != "All":
            raise errors.bad_request(f'Invalid value: "{v}": supported values: "All"')
    return bool(values)


def _list_body(rt: ResourceType, meta: dict[str, Any], items: list[bytes]) -> bytes:
    """A `<Kind>List` around already encoded objects: one join, no re-encoding."""
    return b"".join(
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


def _body(request: Request) -> Any:
    raw = request.body
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
        self.control: Callable[[Request], Handled] | None = None  # the /_sandbox handler, set by the Emulator

    def handle(self, request: Request) -> Handled:
        """Answer now (a Reply) or later (a coroutine), the way `http.Connection` expects."""
        if request.path.startswith("/api"):
            delay = self.faults.latency_s
            if request.method in _WRITES:
                delay += self.faults.write_latency_s
            if delay > 0:
                return self._delayed(request, delay)
        return self._dispatch(request)

    def _dispatch(self, request: Request) -> Handled:
        try:
            result = self._route(request)
        except ApiError as e:
            return _error_reply(e)
        except Exception as e:  # a bug must answer 500, never take the server down
            return self._internal(request, e)
        if isinstance(result, Reply):
            return result
        return self._guard(request, result)

    async def _guard(self, request: Request, pending: Coroutine[Any, Any, Reply | None]) -> Reply | None:
        try:
            return await pending
        except ApiError as e:
            return _error_reply(e)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as e:
            return self._internal(request, e)

    async def _delayed(self, request: Request, delay: float) -> Reply | None:
        await asyncio.sleep(delay)
        result = self._dispatch(request)
        return result if isinstance(result, Reply) else await result

    @staticmethod
    def _internal(request: Request, e: Exception) -> Reply:
        log.exception("request %s %s failed", request.method, request.path)
        return _error_reply(errors.internal_error(f"{type(e).__name__}: {e}"))

    def _route(self, request: Request) -> Handled:
        path = request.path
        if path.startswith("/api"):
            return self._api(request, path)
        if path.startswith("/_sandbox") and self.control is not None:
            return self.control(request)
        if path.rstrip("/") == "/version":
            return _json_response(encode(discovery.KUBE_VERSION))
        if path in ("/healthz", "/livez", "/readyz"):
            return Reply(b"ok", content_type="text/plain")
        raise errors.page_not_found(path)

    # --- routing ----------------------------------------------------------------------------------

    def _types(self) -> list[ResourceType]:
        return list(self.store.types.values())

    def _api(self, request: Request, path: str) -> Handled:
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
                    return self._watch(request, rt, namespace, query)
                return self._list(rt, namespace, query)
            if method == "POST":
                return self._create(request, rt, namespace or "", query)
            if method == "DELETE":
                return self._delete_collection(request, rt, namespace, query)
            raise errors.method_not_allowed()
        if watch_path:
            return self._watch(request, rt, namespace, query, name=name)
        ns = namespace or ""
        if method == "GET":
            return _json_response(self.store.get_raw(rt, ns, name))
        if method in ("PUT", "PATCH", "DELETE"):
            return self._write(request, rt, ns, name, subresource, query)
        raise errors.method_not_allowed()

    # --- reads ------------------------------------------------------------------------------------

    def _list(self, rt: ResourceType, namespace: str | None, query: Query) -> Reply:
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise errors.bad_request(f"invalid limit: {query.get('limit')!r}") from None
        wanted = query.get("resourceVersion", "")
        if query.get("resourceVersionMatch") == "Exact" and wanted not in ("", "0"):
            # Only the current state is kept, so an exact past snapshot is always "too old".
            if not wanted.isdigit():
                raise errors.bad_request(f'invalid resource version: "{wanted}"')
            if int(wanted) != self.store.rv:
                raise errors.expired(int(wanted), self.store.rv)
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
        return _json_response(_list_body(rt, meta, items))

    def _watch(
        self,
        request: Request,
        rt: ResourceType,
        namespace: str | None,
        query: Query,
        name: str | None = None,
    ) -> Coroutine[Any, Any, Reply | None]:
        field_text = query.get("fieldSelector") or ""
        if name is not None:
            field_text = f"metadata.name={name}" + (f",{field_text}" if field_text else "")
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query.get("timeoutSeconds"))
            except ValueError:
                raise errors.bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')!r}") from None
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
        return serve(request.conn, self.store, self.watch_state, req)

    # --- writes -----------------------------------------------------------------------------------

    def _before_write(self, rt: ResourceType, name: str, *, creating: bool = False) -> None:
        fault = self.faults.write_fault(rt, name, creating=creating)
        if fault is not None:
            raise fault

    def _create(self, request: Request, rt: ResourceType, namespace: str, query: Query) -> Reply:
        body = _body(request)
        dry_run = _dry_run(query)
        name = ""
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            name = str(body["metadata"].get("name") or "")
        self._before_write(rt, name, creating=True)
        return _json_response(self.store.create(rt, namespace, body, dry_run=dry_run), 201)

    def _write(
        self,
        request: Request,
        rt: ResourceType,
        namespace: str,
        name: str,
        subresource: str,
        query: Query,
    ) -> Reply:
        method = request.method
        if method == "PATCH":
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            patch_type = _PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise errors.unsupported_media_type(content_type)
            raw = request.body
            dry_run = _dry_run(query)
            self._before_write(rt, name)
            return _json_response(
                self.store.patch(
                    rt, namespace, name, patch_type, raw, subresource=subresource, dry_run=dry_run
                )
            )
        body = _body(request)
        dry_run = _dry_run(query, body if method == "DELETE" else None)
        self._before_write(rt, name)
        if method == "PUT":
            return _json_response(
                self.store.update(rt, namespace, name, body, subresource=subresource, dry_run=dry_run)
            )
        if subresource:
            raise errors.method_not_allowed()
        return _json_response(self.store.delete(rt, namespace, name, body, dry_run=dry_run))

    def _delete_collection(
        self, request: Request, rt: ResourceType, namespace: str | None, query: Query
    ) -> Reply:
        body = _body(request)
        dry_run = _dry_run(query, body)
        items, _, _, _ = self.store.select(
            rt,
            namespace,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector")),
        )
        deleted: list[bytes] = []
        for raw in items:
            meta = decode(raw)["metadata"]
            self._before_write(rt, meta["name"])
            deleted.append(
                self.store.delete(rt, meta.get("namespace", ""), meta["name"], body, dry_run=dry_run)
            )
        return _json_response(_list_body(rt, {"resourceVersion": str(self.store.rv)}, deleted))
