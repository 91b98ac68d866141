"""Configuration from the environment: coercion, defaults, and errors that name the variable."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from corral_runtime.config import ConfigError, ServiceConfig, env_name, load_config, unknown_variables


class EngineUpgradeConfig(ServiceConfig, frozen=True, kw_only=True):
    concurrent_per_node: Annotated[int, msgspec.Meta(ge=1)] = 2
    dry_run: bool = False
    watched_kinds: list[str] = msgspec.field(default_factory=lambda: ["volumes"])
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    offline_only: frozenset[str] = frozenset()
    cluster: str


def test_defaults_apply_when_the_environment_is_silent() -> None:
    config = load_config(ServiceConfig, environ={})
    assert config == ServiceConfig()
    assert config.namespace == "longhorn-system"
    assert config.nats_url == "nats://127.0.0.1:4222"


def test_strings_are_converted_to_the_field_types() -> None:
    config = load_config(
        EngineUpgradeConfig,
        environ={
            "CORRAL_CLUSTER": "lab",
            "CORRAL_HEALTH_PORT": "9100",
            "CORRAL_LEASE_TTL_S": "2.5",
            "CORRAL_DRY_RUN": "true",
            "CORRAL_CONCURRENT_PER_NODE": "4",
            "CORRAL_WATCHED_KINDS": "volumes, engines ,nodes",
            "CORRAL_LABELS": '{"team": "storage"}',
            "CORRAL_OFFLINE_ONLY": '["pvc-1", "pvc-2"]',
            "CORRAL_NAMESPACE": "lh",
            "UNRELATED": "ignored",
        },
    )
    assert config.cluster == "lab"
    assert config.health_port == 9100
    assert config.lease_ttl_s == 2.5
    assert config.dry_run is True
    assert config.concurrent_per_node == 4
    assert config.watched_kinds == ["volumes", "engines", "nodes"]
    assert config.labels == {"team": "storage"}
    assert config.offline_only == frozenset({"pvc-1", "pvc-2"})
    assert config.namespace == "lh"


def test_a_prefix_other_than_corral_can_be_used() -> None:
    config = load_config(ServiceConfig, prefix="LHU_", environ={"LHU_HEALTH_PORT": "0"})
    assert config.health_port == 0
    assert env_name("health_port", "LHU_") == "LHU_HEALTH_PORT"


def test_every_problem_is_reported_with_its_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            EngineUpgradeConfig,
            environ={
                "CORRAL_HEALTH_PORT": "eighty",
                "CORRAL_CONCURRENT_PER_NODE": "0",
                "CORRAL_LOG_LEVEL": "loud",
                "CORRAL_LABELS": "{not json",
            },
        )
    problems = caught.value.problems
    assert len(problems) == 5, problems
    text = str(caught.value)
    assert "CORRAL_HEALTH_PORT='eighty': Expected `int`, got `str`" in text
    assert "CORRAL_CONCURRENT_PER_NODE='0': Expected `int` >= 1" in text
    assert "CORRAL_LOG_LEVEL='loud'" in text and "one of: critical, debug, error, info, warning" in text
    assert "CORRAL_LABELS='{not json': not valid JSON" in text
    assert "CORRAL_CLUSTER is required" in text


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("CORRAL_HEALTH_PORT", "70000", "Expected `int` <= 65535"),
        ("CORRAL_LEASE_TTL_S", "0", "Expected `float` > 0.0"),
        ("CORRAL_SHUTDOWN_GRACE_S", "-1", "Expected `float` >= 0.0"),
        ("CORRAL_DRY_RUN", "maybe", "Expected `bool`, got `str`"),
        ("CORRAL_LABELS", "team=storage", "expected a JSON object"),
        ("CORRAL_NATS_REPLICAS", "0", "Expected `int` >= 1"),
    ],
)
def test_out_of_range_and_malformed_values_are_refused(variable: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=variable) as caught:
        load_config(EngineUpgradeConfig, environ={"CORRAL_CLUSTER": "lab", variable: value})
    assert caught.value.problems == [f"{variable}={value!r}: {expected}"]


class Window(ServiceConfig, frozen=True, kw_only=True):
    min_replicas: int = 1
    max_replicas: int = 3

    def __post_init__(self) -> None:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")


def test_cross_field_checks_surface_as_config_errors() -> None:
    with pytest.raises(ConfigError, match="min_replicas must not exceed max_replicas"):
        load_config(Window, environ={"CORRAL_MIN_REPLICAS": "5"})


class Limits(msgspec.Struct, frozen=True):
    cpu: int = 1


class Shapes(ServiceConfig, frozen=True, kw_only=True):
    retries: int | None = None
    nodes: list[str] | None = None
    limits: Limits = Limits()
    window: tuple[int, int] = (1, 2)


def test_optional_nested_and_tuple_fields() -> None:
    config = load_config(
        Shapes,
        environ={
            "CORRAL_RETRIES": "5",
            "CORRAL_NODES": "node-a,node-b",
            "CORRAL_LIMITS": '{"cpu": "3"}',
            "CORRAL_WINDOW": "3,4",
        },
    )
    assert config.retries == 5
    assert config.nodes == ["node-a", "node-b"]
    assert config.limits == Limits(cpu=3)
    assert config.window == (3, 4)


def test_errors_inside_a_nested_value_keep_their_path() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(Shapes, environ={"CORRAL_LIMITS": '{"cpu": "many"}'})
    assert caught.value.problems == [
        'CORRAL_LIMITS=\'{"cpu": "many"}\': Expected `int`, got `str` - at `$.cpu`'
    ]


def test_a_misspelt_variable_is_named_with_the_setting_it_resembles() -> None:
    environ = {
        "CORRAL_LEASE_TTL": "3",  # CORRAL_LEASE_TTL_S
        "CORRAL_NAMESPACE": "storage",  # a setting: nothing said
        "CORRAL_SOMETHING_ELSE": "1",
        "CORRAL_NATS_PASSWORD_ADMIN": "x",  # nats-server's, not a service's
        "CORRAL_KUBECONFIG": "/k",  # the kube client's
        "HOME": "/root",
    }
    assert unknown_variables(ServiceConfig, environ=environ) == [
        "CORRAL_LEASE_TTL is not a setting of this service: did you mean CORRAL_LEASE_TTL_S?",
        "CORRAL_SOMETHING_ELSE is not a setting of this service: it sets nothing here and is ignored",
    ]
    assert unknown_variables(EngineUpgradeConfig, environ={"CORRAL_DRY_RUNN": "1"}) == [
        "CORRAL_DRY_RUNN is not a setting of this service: did you mean CORRAL_DRY_RUN?"
    ]
