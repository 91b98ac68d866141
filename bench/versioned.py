"""A benchmark's made-up cluster, written as the events the watcher would publish: every write gets
the next resourceVersion, as the API server gives it, and a seeded random source picks what changes.
The decision benchmarks feed a decider these events directly (no bus, no emulator)."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.kinds import KINDS


class VersionedCluster:
    def __init__(self, seed: int, namespace: str = "longhorn-system") -> None:
        self.rng = random.Random(seed)
        self.rv = 0
        self.namespace = namespace
        self.pods: dict[str, lh.Pod] = {}

    def event(self, kind: str, obj: Any) -> ObjectEvent[Any]:
        """`obj` written once more: MODIFIED at the next resourceVersion (cluster-scoped kinds
        carry no namespace, as on the bus)."""
        self.rv += 1
        meta = msgspec.structs.replace(obj.metadata, resource_version=str(self.rv))
        obj = msgspec.structs.replace(obj, metadata=meta)
        return ObjectEvent(
            type=EventType.MODIFIED,
            kind=kind,
            namespace=self.namespace if KINDS[kind].namespaced else "",
            name=meta.name,
            uid=meta.uid,
            resource_version=meta.resource_version,
            object=obj,
        )

    def pod_update(self) -> ObjectEvent[Any]:
        """A running pod's container restarts once more (status only: no setting reads it)."""
        name = self.rng.choice(list(self.pods))
        pod = self.pods[name]
        restarts = pod.status.container_statuses[0].restart_count + 1
        status = lh.PodStatus(
            phase="Running", container_statuses=(lh.ContainerStatus(ready=True, restart_count=restarts),)
        )
        pod = self.pods[name] = msgspec.structs.replace(pod, status=status)
        return self.event("pod", pod)
