"""Conformance of the simulated Longhorn where issue 24's explorer found it unlike Longhorn, round
by round (in-process World):

* SC-R-01 an instance manager's status maps and its engines' and replicas' states change in the
  same round (Longhorn's instance handler copies an instance's state from its IM's map: the two
  never disagree for a round);
* SC-R-02 the engine-image controller acts only on committed states: it patches its DaemonSets'
  node selector only in a round that starts with every volume detached as the API server holds
  it, never on a detach the same round has only just written (which the server may refuse);
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
