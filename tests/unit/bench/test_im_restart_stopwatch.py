"""The im-restart latency bench's stopwatch: it times an IM's last instance going from running or
starting to stopped (under the IM the instance was in), and a pod's first delete only."""

from __future__ import annotations

from bench.im_restart_latency import Stopwatch


def _instance(state: str, manager: str) -> dict[str, object]:
    return {"status": {"currentState": state, "instanceManagerName": manager}}


def test_the_last_stop_per_instance_manager_and_the_first_delete() -> None:
    watch = Stopwatch()
    watch.instance("UPDATE", _instance("running", "im-1"), _instance("stopped", ""))
    first = watch.last_stop["im-1"]
    watch.instance("UPDATE", _instance("starting", "im-1"), _instance("stopped", ""))
    assert watch.last_stop["im-1"] >= first
    watch.instance("UPDATE", _instance("stopped", "im-2"), _instance("stopped", ""))  # no transition
    watch.instance("UPDATE", _instance("running", "im-3"), _instance("error", ""))  # not a stop
    assert set(watch.last_stop) == {"im-1"}
    pod = {"metadata": {"name": "im-1"}}
    watch.pod("DELETE", pod, None)
    deleted = watch.deleted["im-1"]
    watch.pod("DELETE", pod, None)
    watch.pod("DELETE", {"metadata": {"name": "im-2", "deletionTimestamp": "t"}}, None)
    assert watch.deleted == {"im-1": deleted}
