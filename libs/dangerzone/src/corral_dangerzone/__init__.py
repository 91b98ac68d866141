"""Longhorn's danger-zone settings, once: the setting-sync and im-restart deciders and the sandbox
simulator all read settings through this package, so Longhorn's parsing rules cannot drift apart.

Pure: no I/O, no NATS, no Kubernetes client. Rules: ../shared/spec/longhorn-behaviour.md §3, §4.4, §4.5.
"""
