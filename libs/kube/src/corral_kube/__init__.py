"""Kubernetes access shared by the watcher and the actuator: kubeconfig, list/watch decoding, JSON Patch."""
