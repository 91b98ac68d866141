"""`corral progress im-restart`'s model: per node, IMs done / in flight / waiting / blocked with the
service's own judgement, and one line per IM that is not done (busy instances, the settings its
pod lags, since when)."""

from __future__ import annotations

import io

from corral_cli.progress.render import LineView
from corral_dangerzone.settings import DangerZoneSettings
from corral_decision import decision_service
from corral_im_restart.progress import ImProgress
from corral_model import longhorn as lh
from tests.unit.im_restart.cluster import Cluster, im_pod, instance_manager, kube_node, ready_node, setting


def cluster_with_progress() -> tuple[Cluster, ImProgress]:
    cluster = Cluster()
    progress = ImProgress(cluster.clock)
    cluster.decider = progress.decider  # the events go to the model's own decider
    defaults = DangerZoneSettings.defaults()
    nodes = {n: (ready_node(n), kube_node(n)) for n in ("node-1", "node-2")}
    for name, node, replicas in (
        ("im-busy", "node-1", {"r-1": "running"}),
        ("im-idle", "node-2", {}),
        ("im-gone", "node-2", {}),
    ):
        lh_node, kube = nodes[node]
        im = instance_manager(name, node, replicas=replicas)
        cluster.put(lh_node, kube, im)
        if name != "im-gone":
            cluster.put(im_pod(im, defaults, lh_node, kube))
    cluster.resync()
    return cluster, progress


def test_figures_and_lines_follow_the_services_own_judgement() -> None:
    cluster, progress = cluster_with_progress()
    assert progress.complete
    rows = {row.node: row for row in progress.groups()}
    assert (rows["node-1"].done, rows["node-2"].done, rows["node-2"].in_flight) == (1, 1, 1)
    assert not progress.finished(), "im-gone has no pod yet: a restart under way"

    cluster.put(setting("priority-class", "high"))
    rows = {row.node: row for row in progress.groups()}
    assert dict(rows["node-1"].blocked) == {"busy": 1}
    assert rows["node-2"].waiting == 1
    details = progress.details()
    assert (
        "im-busy  node-1  blocked: busy  busy: r-1  unsynced: priority-class  since 1970-01-12T13:46:40Z"
        in details
    )
    assert "im-idle  node-2  waiting  unsynced: priority-class  since 1970-01-12T13:46:40Z" in details
    assert any(line.startswith("im-gone  node-2  in-flight") for line in details)

    # The since-time comes from the SettingSynced condition once im-restart wrote it.
    written = lh.Condition(
        type="SettingSynced",
        status="False",
        reason="SettingNotSynced",
        last_transition_time="2026-11-25T09:00:00Z",
    )
    cluster.put(instance_manager("im-busy", "node-1", replicas={"r-1": "running"}, conditions=(written,)))
    cluster.clock.now += 60
    assert any("im-busy" in line and "since 1970-01-12T13:46:40Z" in line for line in progress.details()), (
        "the first time seen stays until the IM is synced"
    )


def test_a_line_view_prints_each_im_line_once_and_the_cli_finds_the_model() -> None:
    cluster, progress = cluster_with_progress()
    cluster.put(setting("priority-class", "high"))
    out = io.StringIO()
    view = LineView(out)
    view.update(progress, 1.0)
    view.update(progress, 2.0)
    printed = out.getvalue().splitlines()
    assert sum("im-idle  node-2  waiting" in line for line in printed) == 1
    assert any("node-1" in line and "blocked 1 (busy 1)" in line for line in printed)
    service = decision_service("im-restart")
    assert service.progress is ImProgress
