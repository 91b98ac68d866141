"""The NATS users' passwords as a Kubernetes Secret, made by the setup Job rather than by the chart.

A chart that renders random passwords renders different ones every time (`helm template`, Argo CD,
Flux), so a GitOps tool would rotate them on every sync, and one that reads them back with `lookup`
only works under `helm install`. The chart's bus-init Job instead runs
`corral bus passwords --kube-secret NAME`: the Secret is made once, with a random password per user
(starting with a letter: nats-server reads a value that looks like a number as one); later runs keep
every password there and add only a user that is missing. Nothing is ever rotated here.
"""

from __future__ import annotations

import base64
import secrets

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from corral_bus.permissions import USERS

CONFLICT, NOT_FOUND = 409, 404


def new_password() -> str:
    return "p" + secrets.token_hex(16)


def _encoded(password: str) -> str:
    return base64.b64encode(password.encode()).decode()


async def ensure_password_secret(
    api: client.ApiClient, namespace: str, name: str, labels: dict[str, str] | None = None
) -> list[str]:
    """Make the Secret, or add the users it lacks; returns the users whose password was made now."""
    core = client.CoreV1Api(api)
    for _ in range(3):  # another run made it between our read and our create: read it again
        try:
            found = await core.read_namespaced_secret(name, namespace)
        except ApiException as e:
            if e.status != NOT_FOUND:
                raise
        else:
            have = dict(found.data or {})
            missing = [user for user in USERS if not have.get(user)]
            if missing:
                patch = {"data": {user: _encoded(new_password()) for user in missing}}
                await core.patch_namespaced_secret(name, namespace, patch)
            return missing
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=namespace,
                labels={"app.kubernetes.io/part-of": "corral", **(labels or {})},
            ),
            type="Opaque",
            data={user: _encoded(new_password()) for user in USERS},
        )
        try:
            await core.create_namespaced_secret(namespace, body)
        except ApiException as e:
            if e.status != CONFLICT:
                raise
            continue
        return list(USERS)
    raise RuntimeError(f"Secret {namespace}/{name} kept changing while it was being made")
