"""The image says what it is to registries and scanners (OCI labels: version, source, revision,
licence), and the licence it names is the one at the root of the tree and inside the image."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "image" / "Dockerfile"


def _runtime_stage() -> str:
    return DOCKERFILE.read_text().rsplit("\nFROM ", 1)[1]


def test_the_runtime_image_carries_the_oci_labels() -> None:
    stage = _runtime_stage()
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', stage))
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert "COPY LICENSE /opt/corral/LICENSE" in stage


def test_the_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split("\n", 2)[:2] == [
        " " * 33 + "Apache License",
        " " * 27 + "Version 2.0, January 2004",
    ]
    assert "END OF TERMS AND CONDITIONS" in text
