"""The actuator's only door to the API server: rate-limited, retried, decoded with msgspec.

Requests go through kubernetes-asyncio's generic `ApiClient.call_api` (auth, TLS, connection pool
as configured from the kubeconfig), but the response body is read raw and decoded with msgspec:
the actuator needs a resourceVersion or a plain dict, never the generated model classes, which
cost more than the request itself at thousands of writes a second.

Every attempt takes a token from the rate limiter first. Overload and server trouble (429, 5xx,
timeouts, broken connections) are retried with jittered exponential backoff by stamina, honouring
Retry-After; when the attempts run out the last error surfaces as `TransientApiError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import stamina
from kubernetes_asyncio import client

from corral_actuator.classify import Answer, TransientApiError, classify, retry_after_seconds
from corral_actuator.limiter import RateLimiter

JSON_PATCH = "application/json-patch+json"
JSON = "application/json"


class _Status(msgspec.Struct):
    """The Kubernetes `Status` body of an error answer."""

    message: str = ""
    reason: str = ""


class _Meta(msgspec.Struct, frozen=True):
    resourceVersion: str = ""
    uid: str = ""


class _Head(msgspec.Struct):
    metadata: _Meta = _Meta()


_status_decoder = msgspec.json.Decoder(_Status)
_head_decoder = msgspec.json.Decoder(_Head)
_any_decoder = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class Answered:
    """One API server answer, after retries."""

    status: int
    body: bytes

    @property
    def answer(self) -> Answer:
        return classify(self.status)

    @property
    def message(self) -> str:
        try:
            decoded = _status_decoder.decode(self.body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return self.body[:200].decode(errors="replace")
        return decoded.message or decoded.reason

    @property
    def resource_version(self) -> str:
        try:
            return _head_decoder.decode(self.body).metadata.resourceVersion
        except (msgspec.DecodeError, msgspec.ValidationError):
            return ""

    def document(self) -> dict[str, Any] | None:
        try:
            value = _any_decoder.decode(self.body)
        except msgspec.DecodeError:
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 6
    timeout: float = 30.0
    wait_initial: float = 0.05
    wait_max: float = 2.0
    wait_jitter: float = 0.1


def _backoff(exc: Exception) -> bool | float:
    if not isinstance(exc, TransientApiError):
        return False
    return exc.retry_after if exc.retry_after is not None else True


class KubeApi:
    """Raw requests to the API server for the paths `corral_model.kinds.KindInfo.path()` builds."""

    def __init__(
        self,
        api: client.ApiClient,
        limiter: RateLimiter,
        *,
        request_timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        dry_run: bool = False,
    ) -> None:
        self.api = api
        self.limiter = limiter
        self.request_timeout = request_timeout
        self.retry = retry or RetryPolicy()
        self.dry_run = dry_run
        self.requests = 0
        self.retries = 0

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        write: bool = True,
    ) -> Answered:
        """Send one request, retrying transient failures; raises TransientApiError when they persist."""
        query: list[tuple[str, str]] = [("dryRun", "All")] if write and self.dry_run else []
        r = self.retry
        first = True
        async for attempt in stamina.retry_context(
            on=_backoff,
            attempts=r.attempts,
            timeout=r.timeout,
            wait_initial=r.wait_initial,
            wait_max=r.wait_max,
            wait_jitter=r.wait_jitter,
        ):
            with attempt:
                if not first:
                    self.retries += 1
                first = False
                return await self._once(method, path, body, content_type, query)
        raise AssertionError("unreachable: stamina re-raises the last error")  # pragma: no cover

    async def _once(
        self, method: str, path: str, body: Any, content_type: str, query: Sequence[tuple[str, str]]
    ) -> Answered:
        await self.limiter.acquire()
        self.requests += 1
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=list(query),
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
            async with response:
                data = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except TimeoutError as e:
            raise TransientApiError(f"{method} {path}: no answer within {self.request_timeout}s") from e
        except aiohttp.ClientError as e:
            raise TransientApiError(f"{method} {path}: {type(e).__name__}: {e}") from e
        answered = Answered(status, data)
        if answered.answer is Answer.RETRY:
            raise TransientApiError(
                f"{method} {path}: HTTP {status} {answered.message}".rstrip(),
                status=status,
                retry_after=retry_after_seconds(retry_after),
            )
        return answered

    async def get(self, path: str) -> Answered:
        return await self.request("GET", path, write=False)
