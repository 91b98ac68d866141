"""Request spans are named by the resource, never by the object: span names must not grow."""

from __future__ import annotations

import pytest

from corral_actuator.tracing import resource_of


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/apis/longhorn.io/v1beta2/namespaces/longhorn-system/volumes/pvc-1", "volumes"),
        ("/apis/longhorn.io/v1beta2/namespaces/longhorn-system/settings/x/status", "settings"),
        ("/api/v1/namespaces/longhorn-system/events", "events"),
        ("/api/v1/namespaces/longhorn-system", "namespaces"),
        ("/api/v1/nodes/node-1", "nodes"),
        ("/apis/longhorn.io/v1beta2/nodes/node-1?dryRun=All", "nodes"),
    ],
)
def test_a_request_span_is_named_by_its_resource(path: str, resource: str) -> None:
    assert resource_of(path) == resource
