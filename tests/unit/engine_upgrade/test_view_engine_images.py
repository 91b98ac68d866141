"""How the view folds EngineImage events: one arrives with every refCount move during a wave and
carries every node's deployment entry, so an event that changes no fact the rules read must change
nothing but the resourceVersion, while one that does must reach every volume's rules."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_engine_upgrade.image_facts import EngineImageFacts
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, NO_IMPACT, ClusterView, InvalidEvent
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from tests.unit.engine_upgrade.cluster import NEW, NODES, NS, engine_image, setting


def event(obj: Any, rv: int, kind: str = "engineimage") -> ObjectEvent[Any]:
    return ObjectEvent(
        type=EventType.MODIFIED,
        kind=kind,
        namespace=NS,
        name=obj.metadata.name,
        resource_version=str(rv),
        object=obj,
    )


def with_ref_count(ei: lh.EngineImage, count: int) -> lh.EngineImage:
    return msgspec.structs.replace(ei, status=msgspec.structs.replace(ei.status, ref_count=count))


def test_a_ref_count_move_changes_only_the_resource_version() -> None:
    view = ClusterView()
    view.apply(event(setting(DEFAULT_IMAGE_SETTING, NEW), 1, kind="setting"), 0.0)
    default = engine_image(NEW)
    view.apply(event(default, 2), 0.0)
    record = view.default_engine_image
    assert record is not None
    assert view.apply(event(with_ref_count(default, 7), 3), 0.0) is NO_IMPACT
    moved = view.default_engine_image
    assert moved is not None and moved.rv == 3
    assert moved.ready_nodes is record.ready_nodes  # the same set the rules read, not a rebuilt one
    # An older event arriving late is recognised as stale by the newer resourceVersion.
    assert view.apply(event(with_ref_count(default, 5), 2), 0.0) is NO_IMPACT
    assert view.default_engine_image is moved


def test_a_node_that_stops_being_deployed_reaches_the_rules() -> None:
    view = ClusterView()
    view.apply(event(setting(DEFAULT_IMAGE_SETTING, NEW), 1, kind="setting"), 0.0)
    view.apply(event(engine_image(NEW), 2), 0.0)
    nodes = dict.fromkeys(NODES, True) | {NODES[0]: False}
    impact = view.apply(event(engine_image(NEW, nodes=nodes), 3), 0.0)
    assert impact is not NO_IMPACT and getattr(impact, "everything", False)
    record = view.default_engine_image
    assert record is not None and NODES[0] not in record.ready_nodes and NODES[1] in record.ready_nodes


# --- as the runner decodes them: the node map kept as raw JSON (image_facts.py) -------------------


def from_the_bus(ei: lh.EngineImage) -> EngineImageFacts:
    """What the runner's decode makes of the watcher's JSON for this EngineImage."""
    return msgspec.json.decode(msgspec.json.encode(ei), type=EngineImageFacts)


def test_a_ref_count_move_off_the_bus_is_told_from_the_raw_map() -> None:
    view = ClusterView()
    view.apply(event(setting(DEFAULT_IMAGE_SETTING, NEW), 1, kind="setting"), 0.0)
    default = engine_image(NEW)
    assert view.apply(event(from_the_bus(default), 2), 0.0) is not NO_IMPACT
    record = view.default_engine_image
    assert record is not None and record.ready_nodes == frozenset(NODES)
    assert view.apply(event(from_the_bus(with_ref_count(default, 7)), 3), 0.0) is NO_IMPACT
    moved = view.default_engine_image
    assert moved is not None and moved.rv == 3 and moved.ready_nodes is record.ready_nodes


def test_a_raw_map_that_differs_in_bytes_but_not_in_facts_changes_nothing() -> None:
    view = ClusterView()
    view.apply(event(setting(DEFAULT_IMAGE_SETTING, NEW), 1, kind="setting"), 0.0)
    view.apply(event(from_the_bus(engine_image(NEW)), 2), 0.0)
    # the same ready nodes in another key order, plus a node where it is not deployed
    reordered = dict.fromkeys(reversed(NODES), True) | {"node-new": False}
    assert view.apply(event(from_the_bus(engine_image(NEW, nodes=reordered)), 3), 0.0) is NO_IMPACT


def test_a_node_that_stops_being_deployed_off_the_bus_reaches_the_rules() -> None:
    view = ClusterView()
    view.apply(event(setting(DEFAULT_IMAGE_SETTING, NEW), 1, kind="setting"), 0.0)
    view.apply(event(engine_image(NEW), 2), 0.0)  # first seen as the shared slim Struct
    nodes = dict.fromkeys(NODES, True) | {NODES[0]: False}
    impact = view.apply(event(from_the_bus(engine_image(NEW, nodes=nodes)), 3), 0.0)
    assert getattr(impact, "everything", False)
    record = view.default_engine_image
    assert record is not None and NODES[0] not in record.ready_nodes and NODES[1] in record.ready_nodes


def test_a_malformed_raw_map_is_reported_and_changes_nothing() -> None:
    view = ClusterView()
    view.apply(event(setting(DEFAULT_IMAGE_SETTING, NEW), 1, kind="setting"), 0.0)
    good = from_the_bus(engine_image(NEW))
    view.apply(event(good, 2), 0.0)
    held = view.default_engine_image
    bad_status = msgspec.structs.replace(
        good.status, node_deployment_map=msgspec.Raw(b'{"node-1": "yes"}'), state="deploying"
    )
    with pytest.raises(InvalidEvent, match="nodeDeploymentMap"):
        view.apply(event(msgspec.structs.replace(good, status=bad_status), 3), 0.0)
    assert view.default_engine_image is held
