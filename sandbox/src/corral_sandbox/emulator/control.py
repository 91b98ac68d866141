"""`/_sandbox/…`: the emulator's own control surface, for tests and benchmarks in other processes.

The Kubernetes API has no way to say "answer the next writes with 429" or "how many patches did you
take", so these endpoints do, and `EmulatorControl` calls them:

* `GET/POST/DELETE /_sandbox/faults`: read, partially update, reset the `Faults` knobs;
* `POST /_sandbox/compact`: forget the watch history (older resourceVersions get 410);
* `GET/DELETE /_sandbox/writes`: the write log (filters: verb, plural, namespace, name, dry_run, since);
* `POST /_sandbox/load`: create-or-replace objects as given, status included (seeding, benchmarks);
* `GET /_sandbox/stats`: resourceVersion, object counts, open watches, events sent;
* `/_sandbox/<mount>/…`: whatever was mounted there with `Emulator.mount_control` (the sandbox mounts
  the Longhorn simulator's faults at `/_sandbox/simulator`), so one URL reaches every knob.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import aiohttp
import msgspec

from corral_sandbox.emulator import errors
from corral_sandbox.emulator.http import Handled, Query, Reply, Request
from corral_sandbox.emulator.store import decode, encode
from corral_sandbox.emulator.writelog import WriteRecord

if TYPE_CHECKING:
    from corral_sandbox.emulator.app import Emulator


# a mounted control: (method, the path below the mount point, decoded JSON body) → the answer
ControlMount: TypeAlias = Callable[[str, str, Any], Handled]


def _ok(doc: Any) -> Reply:
    return Reply(encode(doc))


def _write_filters(query: Query) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    for name in ("verb", "plural", "namespace", "name", "subresource"):
        if name in query:
            filters[name] = query.get(name)
    if "dry_run" in query:
        filters["dry_run"] = query.get("dry_run") in ("1", "true", "True")
    if "since" in query:
        try:
            filters["since"] = float(query.get("since"))
        except ValueError:
            raise errors.bad_request(f"since: not a number: {query.get('since')!r}") from None
    return filters


def handler(emulator: Emulator) -> Callable[[Request], Handled]:
    def handle(request: Request) -> Handled:
        what = request.path.removeprefix("/_sandbox").strip("/")
        method = request.method
        try:
            body = decode(request.body) if request.body else {}
        except msgspec.DecodeError as e:
            raise errors.bad_request(f"couldn't decode the request body: {e}") from None
        mount, _, below = what.partition("/")
        if mount in emulator.control_mounts:
            return emulator.control_mounts[mount](method, below, body)
        if what == "faults":
            if method == "POST":
                if not isinstance(body, dict):
                    raise errors.bad_request("faults: expected a JSON object")
                try:
                    emulator.faults.update(body)
                except (ValueError, TypeError) as e:
                    raise errors.bad_request(str(e)) from None
            elif method == "DELETE":
                emulator.faults.reset()
            return _ok(emulator.faults.as_dict())
        if what == "compact" and method == "POST":
            return _ok({"resourceVersion": str(emulator.compact())})
        if what == "writes":
            if method == "DELETE":
                emulator.write_log.clear()
                return _ok({"total": emulator.write_log.total, "records": []})
            records = emulator.write_log.records(**_write_filters(request.query))
            return _ok({"total": emulator.write_log.total, "records": records})
        if what == "load" and method == "POST":
            if not isinstance(body, dict) or not isinstance(body.get("objects"), list):
                raise errors.bad_request("load: expected {group, plural, objects: [...]}")
            count = emulator.load(str(body.get("group", "")), str(body["plural"]), body["objects"])
            return _ok({"count": count, "resourceVersion": str(emulator.resource_version)})
        if what == "stats":
            return _ok(emulator.stats())
        raise errors.page_not_found(request.path)

    return handle


class EmulatorControl:
    """Client of `/_sandbox` for a process that does not hold the Emulator object."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def _call(
        self, method: str, what: str, body: Any = None, params: dict[str, str] | None = None
    ) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        data = encode(body) if body is not None else None
        async with self._session.request(
            method,
            f"{self.url}/_sandbox/{what}",
            data=data,
            params=params,
            headers={"Content-Type": "application/json"},
        ) as resp:
            payload = await resp.read()
            if resp.status >= 400:
                raise RuntimeError(
                    f"{method} /_sandbox/{what}: {resp.status} {payload.decode(errors='replace')}"
                )
            return decode(payload)

    async def set_faults(self, **changes: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("POST", "faults", changes)
        return result

    async def reset_faults(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("DELETE", "faults")
        return result

    async def compact(self) -> int:
        return int((await self._call("POST", "compact", {}))["resourceVersion"])

    async def writes(self, **filters: Any) -> list[WriteRecord]:
        params = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in filters.items()}
        doc = await self._call("GET", "writes", params=params)
        return msgspec.convert(doc["records"], list[WriteRecord])

    async def clear_writes(self) -> None:
        await self._call("DELETE", "writes")

    async def load(self, group: str, plural: str, objects: list[dict[str, Any]]) -> int:
        return int(
            (await self._call("POST", "load", {"group": group, "plural": plural, "objects": objects}))[
                "count"
            ]
        )

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", "stats")
        return result

    async def call(self, method: str, what: str, body: Any = None) -> Any:
        """Any `/_sandbox/<what>` endpoint, e.g. one mounted by the sandbox (`simulator/stall`)."""
        return await self._call(method, what, body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
