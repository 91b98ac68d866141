"""An instance manager's pod is deleted only while its Longhorn node is Ready, and only on that
node as the decision read it.

Longhorn's setting controller deletes lagging instance-manager pods whatever their node's state.
On a NotReady node the delete cannot finish (the pod stays Terminating until the kubelet is back)
and the instance manager's instances there are `unknown`: nothing is gained, and corral holds
every other service to "never an instance manager taken down on a NotReady node" (the fault
explorer's setting-sync/applying/node-notready cell saw setting-sync do it). So the rules wait
while the node is not Ready, and the delete carries the node as read
(corral_decision.pod_delete.node_as_read): a node that changed after the decision refuses it.
"""

from __future__ import annotations

from corral_model import longhorn as lh
from corral_setting_sync.per_engine import EngineIndex


def im_node(engines: EngineIndex, pod: lh.Pod) -> lh.Node | None:
    """The Longhorn node of the instance manager whose pod this is (None: not known)."""
    im = engines.ims.get(pod.metadata.name)
    node = im.spec.node_id if im is not None else pod.spec.node_name
    return engines.nodes.get(node) if node else None


def not_ready(node: lh.Node | None) -> bool:
    return node is not None and lh.condition_status(node.status.conditions, "Ready") != "True"
