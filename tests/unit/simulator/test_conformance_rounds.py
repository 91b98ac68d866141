"""Conformance of the simulated Longhorn where issue 24's explorer found it unlike Longhorn, round
by round (in-process World):

* SC-R-01 an instance manager's status maps and its engines' and replicas' states change in the
  same round (Longhorn's instance handler copies an instance's state from its IM's map: the two
  never disagree for a round);
* SC-R-02 the engine-image controller acts only on committed states: it patches its DaemonSets'
  node selector only in a round that starts with every volume detached as the API server holds
  it, never on a detach the same round has only just written (which the server may refuse);
* SC-R-03 the instances in an instance manager on a NotReady node are `unknown` (Longhorn's
  instance handler), never `error` and then `stopped`; they run on once the node is back;
* SC-R-04 backing-image-manager pods exist only on the nodes that use a backing image (hold a
  replica of a volume with `spec.backingImage`), and go once a node uses none.
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator import objects
from tests.unit.simulator.test_conformance_im import IMAGE, NS, world
from tests.unit.simulator.world import World

LISTED = ("starting", "running", "suspended", "error")


def _disagreements(w: World) -> list[str]:
    """Where an IM's maps and its instances' own states disagree, as the store holds them now."""
    wrong: list[str] = []
    held: dict[str, dict[str, str]] = {}
    for kind, field in (("engine", "instanceEngines"), ("replica", "instanceReplicas")):
        for obj in w.view.all(kind):
            st = obj.get("status") or {}
            manager, state = st.get("instanceManagerName", ""), st.get("currentState", "")
            if manager and state in LISTED:
                held.setdefault(f"{manager}/{field}", {})[obj["metadata"]["name"]] = state
    for im in w.view.all("instancemanager"):
        im_status: dict[str, Any] = im.get("status") or {}
        running = im_status.get("currentState") == "running"
        for field in ("instanceEngines", "instanceReplicas"):
            listed = {n: p["status"]["state"] for n, p in (im_status.get(field) or {}).items()}
            wanted = held.get(f"{im['metadata']['name']}/{field}", {}) if running else {}
            if listed != wanted:
                wrong.append(f"{im['metadata']['name']} {field}: map {listed} != instances {wanted}")
    return wrong


def _rounds_until_quiet(w: World, limit: int = 500) -> list[str]:
    """Round after round (time jumping to the next timer), the disagreements seen after each."""
    seen: list[str] = []
    for _ in range(limit):
        result = w.round()
        seen += [f"t={w.now:.1f}: {d}" for d in _disagreements(w)]
        if result.writes:
            continue
        if result.next_deadline is None or result.next_deadline > w.now + 30:
            return seen
        w.now = result.next_deadline
    raise AssertionError("the world did not settle")


def test_sc_r_01_im_maps_and_instance_states_change_in_the_same_round() -> None:
    w = world()
    w.put("volume", objects.volume("vol-1", NS, image=IMAGE, replicas=3, node_id="node-1"))
    assert _rounds_until_quiet(w) == [], "attaching"
    assert w.get("volume", "vol-1")["status"]["state"] == "attached"
    w.patch("volume", "vol-1", {"spec": {"nodeID": ""}})
    assert _rounds_until_quiet(w) == [], "detaching"
    assert w.get("volume", "vol-1")["status"]["state"] == "detached"


def test_sc_r_02_the_engine_image_daemonset_follows_only_committed_detaches() -> None:
    w = world()
    w.put("volume", objects.volume("vol-1", NS, image=IMAGE, replicas=1, node_id="node-1"))
    w.settle()
    assert w.get("volume", "vol-1")["status"]["state"] == "attached"
    setting = w.get("setting", "system-managed-components-node-selector")
    w.patch("setting", setting["metadata"]["name"], {"value": "storage:yes"})
    w.settle()
    daemonsets = [d for d in w.view.all("daemonset") if d["metadata"]["name"].startswith("engine-image-")]
    assert daemonsets and all(
        not (d["spec"]["template"]["spec"].get("nodeSelector") or {}) for d in daemonsets
    ), "not while a volume is attached"
    w.patch("volume", "vol-1", {"spec": {"nodeID": ""}})
    early: list[str] = []
    for _ in range(200):
        committed = {
            v["metadata"]["name"]: (v.get("status") or {}).get("state") for v in w.view.all("volume")
        }
        result = w.round()
        for write in result.writes:
            body = write.body or {}
            template = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
            held_attached = any(state != "detached" for state in committed.values())
            if write.kind == "daemonset" and "nodeSelector" in template and held_attached:
                early.append(f"t={w.now:.1f}: {write.name} patched while the server held {committed}")
        if not result.writes:
            if result.next_deadline is None or result.next_deadline > w.now + 30:
                break
            w.now = result.next_deadline
    assert early == []
    assert w.get("volume", "vol-1")["status"]["state"] == "detached"
    assert all(
        w.get("daemonset", d["metadata"]["name"])["spec"]["template"]["spec"].get("nodeSelector")
        == {"storage": "yes"}
        for d in daemonsets
    ), "then it follows the setting"


def _node_ready(w: World, node: str, ready: bool) -> None:
    """The node controller's and the kubelet's Ready condition (as SimFaults.set_node_ready)."""
    flag = "True" if ready else "False"
    for kind in ("node", "kubenode"):
        held = w.get(kind, node).get("status", {}).get("conditions") or []
        conditions = [{"type": "Ready", "status": flag}, *(c for c in held if c.get("type") != "Ready")]
        w.patch(kind, node, {"status": {"conditions": conditions}})


def test_sc_r_03_instances_on_a_not_ready_node_are_unknown() -> None:
    w = world()
    w.put("volume", objects.volume("vol-1", NS, image=IMAGE, replicas=3, node_id="node-1"))
    w.settle()
    assert w.get("volume", "vol-1")["status"]["robustness"] == "healthy"
    engine = objects.engine_name("vol-1")
    on_node_1 = [
        (kind, obj["metadata"]["name"])
        for kind in ("engine", "replica")
        for obj in w.view.all(kind)
        if obj["spec"].get("nodeID") == "node-1"
    ]
    assert ("engine", engine) in on_node_1 and any(k == "replica" for k, _ in on_node_1)
    _node_ready(w, "node-1", False)
    states: dict[tuple[str, str], set[str]] = {key: set() for key in on_node_1}
    for _ in range(60):
        result = w.round()
        for key in on_node_1:
            obj = w.view.get(*key)
            if obj is not None:
                states[key].add((obj.get("status") or {}).get("currentState", ""))
        if not result.writes:
            if result.next_deadline is None or result.next_deadline > w.now + 30:
                break
            w.now = result.next_deadline
    for key, seen in states.items():
        assert seen <= {"running", "unknown"} and "unknown" in seen, (key, seen)
    [im] = [i for i in w.view.all("instancemanager") if i["spec"]["nodeID"] == "node-1"]
    assert im["status"]["currentState"] == "unknown"
    assert w.get("volume", "vol-1")["status"]["state"] == "attached", "Longhorn keeps it attached"
    _node_ready(w, "node-1", True)
    w.settle()
    assert w.get("engine", engine)["status"]["currentState"] == "running", "the process ran on"
    assert w.get("volume", "vol-1")["status"]["state"] == "attached"


def _bim_nodes(w: World) -> set[str]:
    return {
        p["spec"]["nodeName"]
        for p in w.view.all("pod")
        if (p["metadata"].get("labels") or {}).get("longhorn.io/component") == "backing-image-manager"
        and not p["metadata"].get("deletionTimestamp")
    }


def test_sc_r_04_backing_image_managers_only_where_backing_images_are_used() -> None:
    w = world()
    assert _bim_nodes(w) == set(), "no backing image, no backing-image manager"
    w.put("volume", objects.volume("vol-plain", NS, image=IMAGE, replicas=3, node_id="node-1"))
    w.settle()
    assert _bim_nodes(w) == set()
    with_image = objects.volume("vol-bi", NS, image=IMAGE, replicas=2, node_id="node-1")
    with_image["spec"]["backingImage"] = "bi-ubuntu"
    w.put("volume", with_image)
    w.settle()
    holders = {r["spec"]["nodeID"] for r in w.view.all("replica") if r["spec"]["volumeName"] == "vol-bi"}
    assert len(holders) == 2
    assert _bim_nodes(w) == holders
    w.patch("volume", "vol-bi", {"spec": {"nodeID": ""}})
    w.settle()
    w.delete("volume", "vol-bi")
    w.settle()
    assert w.view.get("volume", "vol-bi") is None
    assert _bim_nodes(w) == set(), "gone with the last volume that used a backing image"
