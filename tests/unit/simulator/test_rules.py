"""Longhorn's value rules as the simulator applies them: merge-patch diffs, setting syntax, the IM CPU
formula, and the webhooks it plays."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.admission import LonghornWebhooks
from corral_sandbox.simulator.reconcile import coalesce
from corral_sandbox.simulator.settings import (
    data_engine_value,
    instance_manager_cpu_millis,
    parse_node_selector,
    parse_tolerations,
    storage_network_annotation,
)
from corral_sandbox.simulator.writes import Write, diff_fields, merge_diff

NS = "longhorn-system"
DEFAULT = "longhornio/longhorn-engine:v1.10.0"


def test_diff_fields_patches_only_what_differs_and_nulls_removed_keys() -> None:
    old = {"state": "attached", "modes": {"r1": "RW", "r2": "RW"}, "keep": 1}
    assert diff_fields(old, {"state": "attached"}) is None
    assert diff_fields(old, {"modes": {"r1": "RW"}}) == {"modes": {"r2": None}}
    assert diff_fields(old, {"state": "detached", "gone": None}) == {"state": "detached"}
    assert diff_fields(old, {"keep": None}) == {"keep": None}
    assert merge_diff([1, 2], [1, 2, 3]) == [1, 2, 3]


def test_coalesce_folds_patches_of_one_object_and_keeps_creates_in_order() -> None:
    writes = [
        Write("status", "volume", "v", {"status": {"a": 1}}),
        Write("create", "replica", "r", {"metadata": {"name": "r"}}),
        Write("status", "volume", "v", {"status": {"b": 2}}),
    ]
    folded = coalesce(writes)
    assert [w.verb for w in folded] == ["status", "create"]
    assert folded[0].body == {"status": {"a": 1, "b": 2}}


def test_tolerations_node_selector_and_network_syntax() -> None:
    assert parse_tolerations("key1=value1:NoSchedule; key2:NoExecute") == [
        {"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"},
        {"key": "key2", "operator": "Exists", "effect": "NoExecute"},
    ]
    assert parse_tolerations("") == []
    assert parse_node_selector("disk:ssd; zone : a") == {"disk": "ssd", "zone": "a"}
    assert storage_network_annotation("") == ""
    assert '"interface": "lhnet1"' in storage_network_annotation("kube-system/net")


@pytest.mark.parametrize(
    ("node_request", "allocatable", "guaranteed", "engine", "cores", "expected"),
    [
        (0, 4000, '{"v1":"12","v2":"12"}', "v1", "0", 480),
        (0, 4000, "25", "v1", "0", 1000),
        (750, 4000, '{"v1":"12"}', "v1", "0", 750),
        (0, 4000, '{"v1":"0"}', "v1", "0", 0),
        (0, 4000, '{"v1":"12","v2":"12"}', "v2", '{"v2":"2"}', 2000),
    ],
)
def test_instance_manager_cpu_formula(
    node_request: int, allocatable: int, guaranteed: str, engine: str, cores: str, expected: int
) -> None:
    assert instance_manager_cpu_millis(node_request, allocatable, guaranteed, engine, cores) == expected


def test_data_engine_specific_values() -> None:
    assert data_engine_value('{"v1":"12","v2":"7"}', "v2") == "7"
    assert data_engine_value("20", "v1") == "20"
    assert data_engine_value("{broken", "v1") == ""


class FakeCluster:
    """The webhooks' read side: what the API server holds, as plain dicts."""

    def __init__(self, **plurals: list[dict[str, Any]]) -> None:
        self.plurals = plurals

    def list(
        self, group: str, plural: str, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return [
            o
            for o in self.plurals.get(plural, [])
            if all(o["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.plurals.get(plural, []) if o["metadata"]["name"] == name), None)


def test_engine_image_webhook() -> None:
    default = objects.engine_image(DEFAULT, NS)
    other = objects.engine_image("img:other", NS)
    volume = objects.volume("v", NS, image="img:other")
    setting = {"metadata": {"name": "default-engine-image"}, "value": DEFAULT}
    hooks = LonghornWebhooks(
        FakeCluster(engineimages=[default, other], volumes=[volume], settings=[setting]), NS
    )
    assert "default engine image" in (hooks.engine_image("DELETE", default, None) or "")
    assert "while being used" in (hooks.engine_image("DELETE", other, None) or "")
    assert "already exists" in (hooks.engine_image("CREATE", None, objects.engine_image(DEFAULT, NS)) or "")
    unused = LonghornWebhooks(FakeCluster(engineimages=[other], settings=[setting]), NS)
    assert unused.engine_image("DELETE", other, None) is None


def test_volume_webhook_checks_v1_image_changes_only() -> None:
    incompatible = objects.engine_image("img:bad", NS)
    incompatible["status"] = {"incompatible": True}
    hooks = LonghornWebhooks(FakeCluster(engineimages=[objects.engine_image(DEFAULT, NS), incompatible]), NS)
    old = objects.volume("v", NS, image=DEFAULT)

    def moved(image: str, engine: str = "v1") -> dict[str, Any]:
        return {**old, "spec": {**old["spec"], "image": image, "dataEngine": engine}}

    assert "cannot find engine image" in (hooks.volume("UPDATE", old, moved("img:none")) or "")
    assert "incompatible" in (hooks.volume("UPDATE", old, moved("img:bad")) or "")
    assert hooks.volume("UPDATE", old, moved("img:none", engine="v2")) is None
    assert hooks.volume("UPDATE", old, old) is None
