"""Never a node selector that matches no node.

setting-sync writes `system-managed-components-node-selector` into the pod templates of Longhorn's
components (the CSI plugin, the engine-image DaemonSets, the UI, the driver deployer). The policy
lets it patch `spec/template/spec/nodeSelector`, but not say to what: with setting-sync's
credentials the issue-29 probe set a selector no node carried and took the CSI plugin off every
node, so no volume could be mounted anywhere. Longhorn's own datastore lets such a setting through
too. So before a patch that sets a node selector, the actuator asks the API server for one node
carrying all of its labels (`labelSelector`, `limit=1`) and refuses the patch when there is none.
Removing a selector (null or empty) always passes: it can only widen where the pods may run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote

from corral_actuator.api import KubeApi
from corral_model.envelopes import FieldValue

NODE_SELECTOR_SUFFIX = "/nodeSelector"
INVARIANT = "never a node selector that matches no node"


def selectors_set(changes: Iterable[FieldValue]) -> list[tuple[str, Mapping[str, str]]]:
    """(path, selector) of every change that sets a non-empty node selector."""
    return [
        (change.path, change.value)
        for change in changes
        if change.path.endswith(NODE_SELECTOR_SUFFIX) and isinstance(change.value, Mapping) and change.value
    ]


def label_selector(selector: Mapping[str, str]) -> str:
    """The selector as the API's `labelSelector` query: every label, equal."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))


async def node_selector_refusal(api: KubeApi, changes: Iterable[FieldValue]) -> str | None:
    """Why the changes may not be applied (a node selector no node carries), or None."""
    for path, selector in selectors_set(changes):
        query = quote(label_selector(selector), safe="=,")
        found = await api.read(f"/api/v1/nodes?labelSelector={query}&limit=1", "the cluster's nodes")
        if not (found or {}).get("items"):
            labels = ", ".join(sorted(selector))
            return f"{INVARIANT}: {path} asks for labels ({labels}) that no node carries"
    return None
