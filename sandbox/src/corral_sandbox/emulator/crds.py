"""Finding and reading the CRD manifests in `deploy/crds/`, which the emulator installs at start the
way `kubectl apply -f deploy/crds/` would on a real cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


def default_crd_dir() -> Path | None:
    """$CORRAL_CRD_DIR, else the `deploy/crds` of the source tree this package lives in."""
    env = os.environ.get("CORRAL_CRD_DIR")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "deploy" / "crds"
        if candidate.is_dir():
            return candidate
    return None


def read_crds(directory: Path) -> Iterator[dict[str, Any]]:
    """Every CustomResourceDefinition document in the directory's *.yaml files, in file-name order."""
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                yield doc
