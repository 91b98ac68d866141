"""A kubeconfig for the emulator, so every client reaches it the way it would reach a real cluster."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def kubeconfig(server: str, namespace: str = "longhorn-system") -> dict[str, object]:
    """Plain http, a dummy bearer token (the emulator does not authenticate), one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "corral-sandbox", "cluster": {"server": server}}],
        "users": [{"name": "corral-sandbox", "user": {"token": "corral-sandbox"}}],
        "contexts": [
            {
                "name": "corral-sandbox",
                "context": {"cluster": "corral-sandbox", "user": "corral-sandbox", "namespace": namespace},
            }
        ],
        "current-context": "corral-sandbox",
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike[str], server: str, namespace: str = "longhorn-system") -> Path:
    """Write atomically (rename), so a process waiting for the file never reads half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_text(yaml.safe_dump(kubeconfig(server, namespace), sort_keys=False))
    tmp.replace(target)
    return target
