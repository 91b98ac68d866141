"""Pods built from the same settings look alike: judge each distinct pod shape once per settings.

A danger-zone setting change re-judges every instance manager, and the §4.5 predicates cost
hundreds of microseconds a pod (quantities are exact fractions), far too much for thousands of IMs
per change. But the predicates read only the pod's annotations and spec (not its name, node name
or status), the IM's data engine and v2 spec/status, and a few facts of its nodes; the IM pods of
a cluster come in a handful of such shapes. `ShapeMemo` keys `pod_check` by those inputs, encoded
once per object change, and forgets everything when the settings change.

What goes into a shape is exactly what `corral_dangerzone.synced` reads; the property test
`test_memo_agrees_with_direct_judgement` compares the memo with a direct evaluation on random
clusters, so a predicate that starts reading another field shows up there.
"""

from __future__ import annotations

import msgspec

from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.judge import PodCheck, pod_check
from corral_model.longhorn import InstanceManager, KubeNode, Node, Pod, condition_status

_encode = msgspec.json.Encoder().encode
Shape = tuple[bytes, bytes, bytes]


def pod_shape(pod: Pod) -> bytes:
    spec = msgspec.structs.replace(pod.spec, node_name="") if pod.spec.node_name else pod.spec
    return _encode((pod.metadata.annotations, spec))


def im_shape(im: InstanceManager) -> bytes:
    spec = im.spec
    return _encode(
        (spec.data_engine, spec.data_engine_spec, im.status.data_engine_status, im.status.current_state)
    )


def node_shape(node: Node | None, kube_node: KubeNode | None) -> bytes:
    """The Longhorn node's CPU override and readiness, the Kubernetes node's allocatable and
    capacity; an absent node has a shape of its own (the predicates then fail, uncached)."""
    facts = (
        None if node is None else (node.spec, condition_status(node.status.conditions, "Ready")),
        None if kube_node is None else (kube_node.status.allocatable, kube_node.status.capacity),
    )
    return _encode(facts)


class ShapeMemo:
    """`pod_check` by shape, for one settings snapshot at a time; bounded."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self.checks: dict[Shape, PodCheck] = {}
        """Valid for `settings` only (read directly on the decider's per-event path)."""
        self.settings: DangerZoneSettings | None = None

    def get(self, shape: Shape, settings: DangerZoneSettings) -> PodCheck | None:
        """The check already made for `shape` under these very settings (the common case)."""
        return self.checks.get(shape) if settings is self.settings else None

    def check(
        self,
        shape: Shape,
        im: InstanceManager,
        pod: Pod,
        settings: DangerZoneSettings,
        node: Node | None,
        kube_node: KubeNode | None,
    ) -> PodCheck:
        if settings is not self.settings:
            self.checks.clear()
            self.settings = settings
        found = self.checks.get(shape)
        if found is None:
            found = pod_check(im, pod, settings, node, kube_node)  # raises: not cached
            if len(self.checks) >= self._limit:
                self.checks.clear()
            self.checks[shape] = found
        return found

    def __len__(self) -> int:
        return len(self.checks)
