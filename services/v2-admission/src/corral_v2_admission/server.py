"""The HTTPS endpoint kube-apiserver calls: `POST /validate` with an AdmissionReview, answered with the
rules' verdict. One path for the three resources: the review names its resource.

What it answers when it cannot judge:
* a body that is not an AdmissionReview: HTTP 400 with the reason (logged), never a crash;
* a status write or a resource it does not know: allowed (the configuration never sends them);
* the cluster cannot be read: HTTP 500, so kube-apiserver applies the webhook's `failurePolicy`
  (the chart: `Fail` for the upgrade CRs, `Ignore` for volumes) instead of this server deciding.
"""

from __future__ import annotations

import ssl

from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry, Counter

from corral_runtime import Logger
from corral_v2_admission.cluster import ClusterReader
from corral_v2_admission.facts import LazyFacts, judge
from corral_v2_admission.reservations import ManagerCreates
from corral_v2_admission.review import BadReview, Request, answer, parse
from corral_v2admission import MANAGERS, RESOURCES, Denial

PATH = "/validate"
MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's own limit on an object is about 1.5 MiB; old + new


class AdmissionServer:
    def __init__(
        self, reader: ClusterReader, creates: ManagerCreates, log: Logger, registry: CollectorRegistry
    ) -> None:
        self._reader = reader
        self._creates = creates
        self._log = log
        self._reviews = Counter(
            "corral_v2_admission_reviews",
            "AdmissionReviews answered, by resource, operation and result (allowed, denied, error)",
            ["resource", "operation", "result"],
            registry=registry,
        )
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(PATH, self._validate)
        return app

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=tls, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _validate(self, http: web.Request) -> web.Response:
        try:
            request = parse(await http.read())
        except BadReview as error:
            self._log.warning("bad admission review", reason=str(error))
            self._reviews.labels("", "", "bad-request").inc()
            return web.Response(status=400, text=f"{error}\n")
        resource, operation = request.resource.resource, request.operation
        try:
            denial = await self.review(request)
        except (TimeoutError, client.ApiException, OSError) as error:
            self._log.error(
                "cannot read the cluster to judge a review",
                resource=resource,
                operation=operation,
                name=request.name,
                namespace=request.namespace,
                error=repr(error),
            )
            self._reviews.labels(resource, operation, "error").inc()
            return web.Response(status=500, text=f"cannot read the cluster: {error!r}\n")
        except Exception as error:  # a rule tripping over an object: that object's review fails alone
            self._log.exception("cannot judge a review", resource=resource, name=request.name)
            self._reviews.labels(resource, operation, "error").inc()
            return web.Response(status=500, text=f"cannot judge the review: {error!r}\n")
        self._reviews.labels(resource, operation, "allowed" if denial is None else "denied").inc()
        if denial is not None:
            self._log.info(
                "denied",
                resource=resource,
                operation=operation,
                name=request.name,
                namespace=request.namespace,
                message=denial.message,
            )
        return web.Response(body=answer(request.uid, denial), content_type="application/json")

    async def review(self, request: Request) -> Denial | None:
        resource = request.resource.resource
        if request.sub_resource or resource not in RESOURCES:
            return None
        reader = self._reader.for_namespace(request.namespace)
        if resource != MANAGERS or request.operation != "CREATE":
            return await judge(resource, request.operation, request.old_object, request.object, reader)
        namespace = request.namespace
        async with self._creates.lock:
            facts = LazyFacts()
            stored = await self._reader.managers(namespace)
            facts.managers = {**stored, **self._creates.pending(namespace, stored)}
            denial = await judge(resource, request.operation, None, request.object, reader, facts)
            if denial is None and not request.dry_run:
                self._creates.admitted(namespace, request.name or f"(generated, review {request.uid})")
            return denial
