"""corral's validating admission webhook for the v2 live upgrade (longhorn-behaviour.md §5.3).

kube-apiserver sends it an `admission.k8s.io/v1` AdmissionReview for every create or update of a
DataEngineUpgradeManager, a NodeDataEngineUpgrade or a Longhorn volume (the chart's
ValidatingWebhookConfiguration); it answers with the rules of `corral_v2admission`, the same the
sandbox plays, reading what they ask for through the Kubernetes API (read-only).

It is its own service, not part of v2-upgrade: a decision service holds no Kubernetes credentials
(tests/unit/test_layering.py), while this one must read the cluster and answer kube-apiserver
directly, with its own least-privilege RBAC.
"""
