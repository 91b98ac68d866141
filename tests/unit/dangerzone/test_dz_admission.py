"""Cluster-dependent admission checks (spec §3.2 datastore part; T3.3, T3.5, DZ-06, DZ-11)."""

from __future__ import annotations

import pytest

from corral_dangerzone.admission import ClusterFacts, NodeFacts, validate_with_cluster
from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.quantity import canonical_quantity


def refusal(name: str, value: str, facts: ClusterFacts) -> str:
    with pytest.raises(SettingValueError) as err:
        validate_with_cluster(name, value, facts)
    message = str(err.value)
    assert message.startswith(f"failed to validate setting {name} with invalid value {value}: ")
    return message


def test_t3_3_missing_priority_class() -> None:
    message = refusal("priority-class", "high", ClusterFacts(priority_classes=frozenset({"low"})))
    assert "failed to get priority class high" in message
    assert message.endswith('priorityclasses.scheduling.k8s.io "high" not found')


@pytest.mark.parametrize("value", ["", "high"])
def test_priority_class_existing_or_unset(value: str) -> None:
    validate_with_cluster("priority-class", value, ClusterFacts(priority_classes=frozenset({"high"})))


def test_t3_5_disabling_v1_with_engine_instances() -> None:
    facts = ClusterFacts(engines_with_instances=frozenset({"v1"}))
    assert refusal("v1-data-engine", "false", facts).endswith(
        "cannot apply v1-data-engine setting to Longhorn workloads when there are attached v1 volumes"
    )


@pytest.mark.parametrize(
    ("value", "facts"),
    [
        pytest.param("false", ClusterFacts(), id="T3.5-detached-accepted"),
        pytest.param("false", ClusterFacts(engines_with_instances=frozenset({"v2"})), id="other-engine-busy"),
        pytest.param(
            "true", ClusterFacts(engines_with_instances=frozenset({"v1"})), id="unchanged-value-not-checked"
        ),
        pytest.param(
            "false",
            ClusterFacts(
                current_values={"v1-data-engine": "false"}, engines_with_instances=frozenset({"v1"})
            ),
            id="3.2-only-when-the-value-changes",
        ),
    ],
)
def test_v1_toggle_accepted(value: str, facts: ClusterFacts) -> None:
    validate_with_cluster("v1-data-engine", value, facts)


def _v2_nodes(*nodes: NodeFacts) -> ClusterFacts:
    return ClusterFacts(nodes=nodes)


def test_enabling_v2_needs_hugepage_capacity() -> None:
    facts = _v2_nodes(
        NodeFacts(name="n1", hugepages_2mi_capacity="4Gi"), NodeFacts(name="n2", hugepages_2mi_capacity="1Gi")
    )
    assert refusal("v2-data-engine", "true", facts).endswith(
        "not enough hugepages-2Mi capacity for node n2, requested 2Gi, capacity 1Gi"
    )


def test_enabling_v2_without_capacity_reported() -> None:
    assert refusal("v2-data-engine", "true", _v2_nodes(NodeFacts(name="n1"))).endswith(
        "failed to get hugepages-2Mi capacity for node n1"
    )


@pytest.mark.parametrize(
    "facts",
    [
        pytest.param(_v2_nodes(NodeFacts(name="n1", hugepages_2mi_capacity="2048Mi")), id="exactly-enough"),
        pytest.param(_v2_nodes(NodeFacts(name="n1", v2_disabled=True)), id="node-label-disables-v2"),
        pytest.param(_v2_nodes(NodeFacts(name="n1", available=False)), id="unavailable-node-skipped"),
        pytest.param(
            ClusterFacts(
                current_values={"data-engine-hugepage-enabled": '{"v2":"false"}'},
                nodes=(NodeFacts(name="n1"),),
            ),
            id="hugepages-off",
        ),
    ],
)
def test_enabling_v2_accepted(facts: ClusterFacts) -> None:
    validate_with_cluster("v2-data-engine", "true", facts)


def test_disabling_v2_with_instances() -> None:
    facts = ClusterFacts(current_values={"v2-data-engine": "true"}, engines_with_instances=frozenset({"v2"}))
    assert refusal("v2-data-engine", "false", facts).endswith("when there are attached v2 volumes")


def test_snapshot_purge_pair() -> None:
    assert refusal("disable-snapshot-purge", "true", ClusterFacts()).endswith(
        "cannot set disable-snapshot-purge setting to true "
        "when auto-cleanup-system-generated-snapshot setting is true"
    )
    validate_with_cluster(
        "disable-snapshot-purge", "true", ClusterFacts(auto_cleanup_system_generated_snapshot=False)
    )
    # Longhorn compares the raw string with "true": "True" is a valid bool that slips through.
    validate_with_cluster("disable-snapshot-purge", "True", ClusterFacts())


@pytest.mark.parametrize(
    ("value", "facts", "ending"),
    [
        pytest.param(
            '{"v2":"2"}',
            ClusterFacts(
                nodes=(NodeFacts(name="n1", cpu_policy="static"), NodeFacts(name="n2", cpu_policy="none"))
            ),
            "CPU core number for data engine v2 cannot be set to 2 "
            "when not all nodes have CPU manager policy configured",
            id="3.1-cores-need-static-policy",
        ),
        pytest.param(
            '{"v2":"0"}',
            ClusterFacts(current_values={"data-engine-cpu-mask": '{"v2":"0x0"}'}),
            "CPU core number for data engine v2 cannot be set to 0 when data engine CPU mask is set to 0",
            id="3.1-zero-cores-with-zero-mask",
        ),
    ],
)
def test_cpu_core_refusals(value: str, facts: ClusterFacts, ending: str) -> None:
    assert refusal("data-engine-number-of-cpu-cores", value, facts).endswith(ending)


def test_cpu_cores_accepted() -> None:
    static = ClusterFacts(nodes=(NodeFacts(name="n1", cpu_policy="Static"),))
    validate_with_cluster("data-engine-number-of-cpu-cores", '{"v2":"2"}', static)
    validate_with_cluster("data-engine-number-of-cpu-cores", '{"v2":"0"}', ClusterFacts())


def test_generic_validation_runs_first() -> None:
    message = refusal("guaranteed-instance-manager-cpu", '{"v1":"41","v2":"1"}', ClusterFacts())
    assert "value 41 for data engine v1 should be less than or equal to 40" in message


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("2048Mi", "2Gi"), ("1536Mi", "1536Mi"), ("1000M", "1G"), ("0", "0"), ("1Gi", "1Gi")],
)
def test_canonical_quantity(text: str, canonical: str) -> None:
    assert canonical_quantity(text) == canonical
