"""What a test (or an operator, through `GET /_sandbox/simulator/instance-managers`) reads about the
instance managers' pods: per IM its node, data engine and state, the pod it has now (uid, phase,
container restartCount) and every pod uid it has had, in order.

IM-01..14 assert that an IM pod is replaced at most once per idle period and that busy pods keep
their restartCount at 0 (T4.3/T4.4). The emulator only ever shows the pod of the moment; the
simulator sees every pod it runs, so it keeps their uids (a replacement faster than a test's poll
would otherwise go unseen).
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator.context import Memory
from corral_sandbox.simulator.view import ClusterView, spec, status


def instance_manager_pods(view: ClusterView, memory: Memory) -> list[dict[str, Any]]:
    """One entry per IM in view (and per IM gone whose pods were seen), sorted by name."""
    in_view = {im["metadata"]["name"] for im in view.all("instancemanager")}
    names = sorted(in_view | set(memory.im_pod_history))
    entries = []
    for name in names:
        im = view.get("instancemanager", name)
        pod = view.get("pod", name)
        current: dict[str, Any] | None = None
        if pod is not None:
            containers = status(pod).get("containerStatuses", []) or [{}]
            current = {
                "uid": pod["metadata"].get("uid", ""),
                "phase": status(pod).get("phase", ""),
                "restartCount": int(containers[0].get("restartCount", 0) or 0),
                "terminating": bool(pod["metadata"].get("deletionTimestamp")),
            }
        history = list(memory.im_pod_history.get(name, []))
        entries.append(
            {
                "name": name,
                "node": spec(im).get("nodeID", "") if im is not None else "",
                "dataEngine": spec(im).get("dataEngine", "v1") if im is not None else "",
                "state": status(im).get("currentState", "") if im is not None else "deleted",
                "pod": current,
                "podUIDs": history,
                "recreations": max(0, len(history) - 1),
            }
        )
    return entries
