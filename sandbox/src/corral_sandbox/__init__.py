"""The sandbox cluster: a Kubernetes API emulator and a Longhorn data-plane simulator."""
