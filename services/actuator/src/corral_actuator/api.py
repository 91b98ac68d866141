"""The actuator's only door to the API server: rate-limited, retried, decoded with msgspec.

kubernetes-asyncio's ApiClient supplies the cluster's address, TLS, connection pool and bearer
token (from the kubeconfig or the ServiceAccount); the request itself is sent raw and the answer
decoded with msgspec: the actuator needs a resourceVersion or a plain dict, never the generated
model classes, which cost more than the request itself at thousands of writes a second.

Every attempt takes a token from the rate limiter first. Overload and server trouble (429, 5xx,
timeouts, broken connections) are retried with jittered exponential backoff by stamina, honouring
Retry-After; when the attempts run out the last error surfaces as `TransientApiError`.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import stamina
from kubernetes_asyncio import client
from opentelemetry.trace import Tracer
from yarl import URL

from corral_actuator.classify import Answer, TransientApiError, classify, retry_after_seconds
from corral_actuator.limiter import RateLimiter
from corral_actuator.tracing import request_span

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
_encode = msgspec.json.Encoder().encode


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
    """Raw requests to the API server for the paths `corral_model.kinds.KindInfo.path()` builds.

    The ApiClient supplies what makes a request reach the cluster: the server URL, the TLS
    connector and its connection pool, and the bearer token (refreshed by its own hook). Requests
    are sent on an aiohttp session over that same connector but without `trust_env`, which would
    cost two thread hand-offs per request (netrc and proxy lookups) for nothing the kubeconfig
    does not already say; bodies are encoded with msgspec.
    """

    def __init__(
        self,
        api: client.ApiClient,
        limiter: RateLimiter,
        *,
        request_timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        dry_run: bool = False,
        tracer: Tracer | None = None,
    ) -> None:
        """`tracer`: a span per request, with the status the server answered (tracing.py)."""
        self.api = api
        self.tracer = tracer
        self.limiter = limiter
        self.request_timeout = request_timeout
        self.retry = retry or RetryPolicy()
        self.dry_run = dry_run
        self.requests = 0
        self.retries = 0
        self._host = str(api.configuration.host or "").rstrip("/")
        self._proxy = api.configuration.proxy or None
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=self.api.rest_client.pool_manager.connector, connector_owner=False, trust_env=False
            )
        return self._session

    async def close(self) -> None:
        """Close this session (the ApiClient, which owns the connector, is closed by its owner)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        write: bool = True,
        retried: bool = True,
    ) -> Coroutine[Any, Any, Answered]:
        """Send one request, retrying transient failures; raises TransientApiError when they persist
        (at once with `retried=False`: the caller retries a larger step, see `retrying`).

        Untraced, the request's own coroutine is handed back rather than awaited in one more: a
        coroutine frame less to create and to pass through at every resumption of every request."""
        if self.tracer is None:
            return self._request(method, path, body, content_type, write, retried)
        return self._traced(self.tracer, method, path, body, content_type, write, retried)

    async def _traced(
        self, tracer: Tracer, method: str, path: str, body: Any, content_type: str, write: bool, retried: bool
    ) -> Answered:
        with request_span(tracer, method, path, self.dry_run and write) as span:
            retries = self.retries
            try:
                answered = await self._request(method, path, body, content_type, write, retried)
            except TransientApiError as e:
                if e.status:
                    span.set_attribute("http.response.status_code", e.status)
                raise
            finally:
                if self.retries > retries:
                    span.set_attribute("corral.retries", self.retries - retries)
            span.set_attribute("http.response.status_code", answered.status)
            return answered

    def retrying(self) -> Any:
        """stamina's retry context with this client's policy, for a caller that retries a whole step
        (read, check, write) rather than one request: `async for attempt in api.retrying(): with
        attempt: ...`."""
        r = self.retry
        return stamina.retry_context(
            on=_backoff,
            attempts=r.attempts,
            timeout=r.timeout,
            wait_initial=r.wait_initial,
            wait_max=r.wait_max,
            wait_jitter=r.wait_jitter,
        )

    async def _request(
        self, method: str, path: str, body: Any, content_type: str, write: bool, retried: bool = True
    ) -> Answered:
        query: list[tuple[str, str]] = [("dryRun", "All")] if write and self.dry_run else []
        if body is None:
            data = None
        elif isinstance(body, dict | list):
            data = _encode(body)  # plain JSON already (a patch, a create body)
        else:
            data = _encode(self.api.sanitize_for_serialization(body))  # a kubernetes-asyncio model
        try:
            # The common case needs no retry machinery at all.
            return await self._once(method, path, data, content_type, query)
        except TransientApiError as e:
            if not retried:
                raise
            failed: TransientApiError | None = e
        async for attempt in self.retrying():
            with attempt:
                if failed is not None:
                    # The attempt made above counts as stamina's first: it schedules the backoff.
                    error, failed = failed, None
                    raise error
                self.retries += 1
                return await self._once(method, path, data, content_type, query)
        raise AssertionError("unreachable: stamina re-raises the last error")  # pragma: no cover

    async def _once(
        self, method: str, path: str, data: bytes | None, content_type: str, query: list[tuple[str, str]]
    ) -> Answered:
        await self.limiter.acquire()
        self.requests += 1
        headers = {"Accept": JSON, "Content-Type": content_type}
        await self.api.update_params_for_auth(headers, query, ["BearerToken"])
        try:
            async with self._http().request(
                method,
                # Paths come from KindInfo.path() with Kubernetes names: already URL-safe.
                URL(self._host + path, encoded=True),
                params=query or None,
                data=data,
                headers=headers,
                timeout=self._timeout,
                proxy=self._proxy,
            ) as response:
                payload = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except TimeoutError as e:
            raise TransientApiError(f"{method} {path}: no answer within {self.request_timeout}s") from e
        except aiohttp.ClientError as e:
            raise TransientApiError(f"{method} {path}: {type(e).__name__}: {e}") from e
        answered = Answered(status, payload)
        if answered.answer is Answer.RETRY:
            raise TransientApiError(
                f"{method} {path}: HTTP {status} {answered.message}".rstrip(),
                status=status,
                retry_after=retry_after_seconds(retry_after),
            )
        return answered

    def get(self, path: str) -> Coroutine[Any, Any, Answered]:
        return self.request("GET", path, write=False)

    async def read(self, path: str, what: str) -> dict[str, Any] | None:
        """The object at `path`, None when it does not exist; TransientApiError naming `what` for
        any other answer (the actuator's guards read related objects with it)."""
        answered = await self.get(path)
        if answered.answer is Answer.NOT_FOUND:
            return None
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            raise TransientApiError(f"reading {what}: HTTP {answered.status}")
        return document
