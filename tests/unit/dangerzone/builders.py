"""Small builders for the Longhorn objects the pod and sync tests need."""

from __future__ import annotations

from corral_model.longhorn import (
    Condition,
    DataEngineSpec,
    DataEngineV2Spec,
    InstanceManager,
    InstanceManagerSpec,
    InstanceManagerStatus,
    KubeNode,
    KubeNodeStatus,
    Node,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
)


def instance_manager(
    engine: str = "v1",
    *,
    node: str = "node-1",
    state: str = "running",
    cpu_mask: str = "",
    cpu_isolation: str = "",
    status: InstanceManagerStatus | None = None,
) -> InstanceManager:
    base = status or InstanceManagerStatus()
    return InstanceManager(
        metadata=ObjectMeta(name=f"instance-manager-{engine}-{node}"),
        spec=InstanceManagerSpec(
            node_id=node,
            data_engine=engine,
            data_engine_spec=DataEngineSpec(
                v2=DataEngineV2Spec(cpu_mask=cpu_mask, cpu_isolation_enabled=cpu_isolation)
            ),
        ),
        status=InstanceManagerStatus(
            current_state=state,
            instance_engines=base.instance_engines,
            instance_engine_frontends=base.instance_engine_frontends,
            instance_replicas=base.instance_replicas,
            data_engine_status=base.data_engine_status,
        ),
    )


def longhorn_node(name: str = "node-1", *, cpu_request: int = 0, ready: bool = True) -> Node:
    return Node(
        metadata=ObjectMeta(name=name),
        spec=NodeSpec(instance_manager_cpu_request=cpu_request),
        status=NodeStatus(conditions=(Condition(type="Ready", status="True" if ready else "False"),)),
    )


def kube_node(
    name: str = "node-1",
    *,
    cpu: str = "4",
    hugepages: str | None = None,
    hugepages_capacity: str | None = None,
) -> KubeNode:
    allocatable = {"cpu": cpu}
    capacity: dict[str, str] = {"cpu": cpu}
    if hugepages is not None:
        allocatable["hugepages-2Mi"] = hugepages
    if hugepages_capacity is not None:
        capacity["hugepages-2Mi"] = hugepages_capacity
    return KubeNode(
        metadata=ObjectMeta(name=name), status=KubeNodeStatus(allocatable=allocatable, capacity=capacity)
    )
