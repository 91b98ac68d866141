"""Cluster seeds: the declarative YAML describing a Longhorn-like cluster, its loader, and the code
that puts it onto an API server (see cluster_objects for why only the installer's objects are written
directly)."""

from pathlib import Path

from corral_sandbox.seeds.cluster_objects import all_volumes, apply_seed, base_objects, bootstrap, resized
from corral_sandbox.seeds.model import Seed, SeedError, load_seed, parse_seed, seed_from_dict

DEFAULT_SEED_FILE = Path(__file__).with_name("default.yaml")
DEMO_SEED_FILE = Path(__file__).with_name("demo.yaml")


def default_seed() -> Seed:
    return load_seed(DEFAULT_SEED_FILE)


def demo_seed() -> Seed:
    """The `make run` demo cluster: volumes on an old engine image, automatic upgrade on (limit 2)."""
    return load_seed(DEMO_SEED_FILE)


__all__ = [
    "DEFAULT_SEED_FILE",
    "DEMO_SEED_FILE",
    "Seed",
    "SeedError",
    "all_volumes",
    "apply_seed",
    "base_objects",
    "bootstrap",
    "default_seed",
    "demo_seed",
    "load_seed",
    "parse_seed",
    "resized",
    "seed_from_dict",
]
