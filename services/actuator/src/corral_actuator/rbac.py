"""The actuator's Kubernetes RBAC, derived from its policy: exactly the verbs the policy allows.

deploy/rbac/actuator.yaml is written by `python -m corral_actuator.rbac > deploy/rbac/actuator.yaml`
and a unit test checks that the file grants what `rules(policy)` says, no more and no less. Each
kind the policy lets the actuator write also gets `get` (the actuator reads an object to find out
why a write was refused, and before every delete); each Setting a rule reads live gets `get`, and
the policy's `reads` section (the start-up gate's reads) is granted as written. Creating Events
brings `patch` on them: a later occurrence of a recorded Event is counted on it, as Kubernetes'
event recorder does.

Where the policy names the objects a rule covers (the Longhorn workloads), the grant carries them
as `resourceNames`, so even a compromised actuator cannot patch another DaemonSet or Deployment
(its own among them).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any

import yaml

from corral_actuator.config import POLICY_FILE
from corral_actuator.kinds import resolve_kind
from corral_actuator.policy import Policy
from corral_model.envelopes import Verb
from corral_model.kinds import KINDS

SERVICE_ACCOUNT = "corral-actuator"
ROLE = "corral-actuator"
Grant = tuple[str, str, str, str]  # (apiGroup, resource, verb, resourceName; ANY: every object)
ANY = ""

_VERB = {
    Verb.PATCH: ("", "patch"),
    Verb.PATCH_STATUS: ("/status", "patch"),
    Verb.CREATE: ("", "create"),
    Verb.DELETE: ("", "delete"),
}


def grants(policy: Policy) -> set[Grant]:
    """Every (apiGroup, resource, verb, name) the actuator needs to do what the policy allows; a
    grant on ANY object makes grants of the same verb on named ones redundant, so they are dropped."""
    out: set[Grant] = set()
    for _service, info, verb, names in policy.grants():
        suffix, http_verb = _VERB[verb]
        for name in names or (ANY,):
            out.add((info.group, info.plural + suffix, http_verb, name))
            out.add((info.group, info.plural, "get", name))
        if (info.group, info.kind, verb) == ("", "Event", Verb.CREATE):
            # An Event recorded again is counted on the one recorded (count, lastTimestamp).
            out.add((info.group, info.plural, "patch", ANY))
    for info, read_verb in policy.reads():
        out.add((info.group, info.plural, read_verb, ANY))
    if policy.setting_reads():
        setting = resolve_kind("setting")
        assert setting is not None
        out.add((setting.group, setting.plural, "get", ANY))
    unrestricted = {(g, r, v) for g, r, v, name in out if name == ANY}
    return {(g, r, v, name) for g, r, v, name in out if name == ANY or (g, r, v) not in unrestricted}


def cluster_scoped(group: str, resource: str) -> bool:
    """Whether the API serves `resource` outside namespaces (core Nodes): a Role cannot grant it."""
    return any(
        (info.group, info.plural) == (group, resource.split("/")[0]) and not info.namespaced
        for info in KINDS.values()
    )


def rules(policy: Policy, *, cluster: bool = False) -> list[dict[str, Any]]:
    """The Role rules (with `cluster`, the ClusterRole's: the cluster-scoped resources): one per
    (apiGroup, resource, resourceNames), verbs sorted, in a stable order."""
    names: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for group, resource, verb, name in grants(policy):
        if cluster_scoped(group, resource) != cluster:
            continue
        names[(group, resource, verb)].add(name)
    verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = defaultdict(set)
    for (group, resource, verb), named in names.items():
        verbs[(group, resource, tuple(sorted(named - {ANY})))].add(verb)
    out: list[dict[str, Any]] = []
    for (group, resource, resource_names), vs in sorted(verbs.items()):
        rule: dict[str, Any] = {"apiGroups": [group], "resources": [resource]}
        if resource_names:
            rule["resourceNames"] = list(resource_names)
        rule["verbs"] = sorted(vs)
        out.append(rule)
    return out


def grants_of(rule_list: list[dict[str, Any]]) -> set[Grant]:
    """Flatten Role rules (any grouping) back into (apiGroup, resource, verb, name) grants."""
    return {
        (group, resource, verb, name)
        for rule in rule_list
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
        for name in rule.get("resourceNames") or [ANY]
    }


def may(granted: set[Grant], group: str, resource: str, verb: str, name: str) -> bool:
    """Whether `granted` lets the actuator do `verb` on the object `name` (as the API server decides)."""
    return (group, resource, verb, ANY) in granted or (group, resource, verb, name) in granted


def manifests(policy: Policy) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "corral", "app.kubernetes.io/component": "actuator"}
    docs: list[dict[str, Any]] = []
    for namespace in sorted(policy.namespaces):
        meta = {"name": SERVICE_ACCOUNT, "namespace": namespace, "labels": labels}
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {**meta, "name": ROLE},
                "rules": rules(policy),
            }
        )
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {**meta, "name": ROLE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
            }
        )
    return docs + cluster_manifests(policy, labels)


def cluster_manifests(policy: Policy, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The ClusterRole and its binding for what the policy reads outside namespaces (the nodes a
    node selector must match), if anything."""
    cluster_rules = rules(policy, cluster=True)
    if not cluster_rules:
        return []
    meta = {"name": ROLE, "labels": labels}
    subjects = [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
        for namespace in sorted(policy.namespaces)
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": cluster_rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": subjects,
        },
    ]


HEADER = """\
# The actuator's ServiceAccount and RBAC: exactly what deploy/policy/actuator-policy.yaml allows,
# plus `get` on the kinds it writes (it reads an object to explain a refused write and before a
# delete) and on the Settings the policy reads live; limited by resourceNames to the objects the
# policy names (the Longhorn workloads, never corral's own). Generated by
#   python -m corral_actuator.rbac > deploy/rbac/actuator.yaml
# and kept in agreement with the policy by tests/unit/actuator/test_rbac.py.
"""


def render(policy: Policy) -> str:
    return HEADER + yaml.safe_dump_all(manifests(policy), sort_keys=False, explicit_start=True)


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else str(POLICY_FILE)
    sys.stdout.write(render(Policy.load(path)))
