"""The image says what it is to registries and scanners (OCI labels: version, source, revision,
licence), and the licence it names is the one at the root of the tree and inside the image.
Production's image (the Dockerfile's default target) has no sandbox; the `sandbox` target adds it
for demos and the compose file's sandbox profile, and `make image` builds both; the chart runs
production's image only. The base is a
build argument passed through as given, so a reference pinned by digest is built as pinned."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.helm import CHART, render

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "image" / "Dockerfile"
MAKE_INHERITED = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "IMAGE", "SANDBOX_IMAGE", "IMAGE_BASE"}
CHART_VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())


def _stages() -> dict[str, tuple[str, str]]:
    """name → (what it is FROM, its instructions), in the file's order."""
    stages: dict[str, tuple[str, str]] = {}
    for chunk in DOCKERFILE.read_text().split("\nFROM ")[1:]:
        first, _, body = chunk.partition("\n")
        parent, _, name = first.partition(" AS ")
        stages[name.strip() or f"stage{len(stages)}"] = (parent.strip(), body)
    return stages


def _instructions(body: str) -> str:
    """The stage's instructions without its comments."""
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("#"))


def test_the_default_target_is_the_runtime_without_the_sandbox() -> None:
    stages = _stages()
    assert list(stages)[-1] == "runtime"  # the last stage: what `docker build` without --target makes
    parent, runtime = stages["runtime"]
    assert parent == "common"
    assert "COPY --from=build /opt/corral /opt/corral" in runtime
    assert "build-sandbox" not in runtime and "crds" not in runtime
    _, common = stages["common"]
    assert "sandbox" not in _instructions(common) and "crds" not in common
    _, build = stages["build"]
    assert "COPY sandbox" not in build
    syncs = [line for line in build.splitlines() if "uv sync" in line]
    assert syncs[-1].rstrip().endswith("--no-editable --no-install-package corral-sandbox"), syncs


def test_the_sandbox_target_adds_the_sandbox_and_its_crds() -> None:
    stages = _stages()
    assert stages["build-sandbox"][0] == "build"
    build_sandbox = stages["build-sandbox"][1]
    assert "COPY sandbox /src/sandbox" in build_sandbox
    assert "uv sync --frozen --no-dev --all-packages --no-editable\n" in build_sandbox
    parent, sandbox = stages["sandbox"]
    assert parent == "common"
    assert "COPY --from=build-sandbox /opt/corral /opt/corral" in sandbox
    assert "COPY deploy/crds /opt/corral/deploy/crds" in sandbox
    assert 'org.opencontainers.image.title="corral-sandbox"' in sandbox


def test_only_the_classic_builders_features() -> None:
    """Debian's docker.io builds it without BuildKit: no syntax line, no heredocs, and no flag on
    RUN, COPY or ADD but the classic builder's --from and --chown (no --mount, --link, --chmod)."""
    text = DOCKERFILE.read_text()
    assert not text.startswith("# syntax")
    flags: set[str] = set()
    for line in _instructions(text).splitlines():
        words = line.split()
        if words and words[0] in ("RUN", "COPY", "ADD"):
            assert "<<" not in line, line
            flags.update(
                word.split("=")[0] for word in itertools.takewhile(lambda w: w.startswith("--"), words[1:])
            )
    assert flags == {"--from"}, flags


def test_the_common_stage_carries_the_oci_labels() -> None:
    parent, stage = _stages()["common"]
    assert parent == "${BASE}"
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', stage))
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert "COPY LICENSE /opt/corral/LICENSE" in stage


def _make_image(*variables: str) -> list[str]:
    """The docker commands `make image` would run (make -n: nothing is built), with the Makefile's
    defaults: not those of a `make test IMAGE=…` this test runs under, nor of the environment."""
    env = {key: value for key, value in os.environ.items() if key not in MAKE_INHERITED}
    done = subprocess.run(
        ["make", "-n", "image", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return [line for line in done.stdout.splitlines() if line.startswith("docker build")]


def test_make_image_builds_the_sandbox_and_then_the_runtime_image() -> None:
    sandbox, runtime = _make_image()
    assert "--target sandbox -t corral/corral-sandbox:local " in sandbox
    assert "--target" not in runtime and " -t corral/corral:local " in runtime
    assert "--build-arg BASE=corral/python-base:3.11 " in runtime  # IMAGE_BASE=local: Debian's base
    sandbox, runtime = _make_image("IMAGE=reg.example/corral:1", "SANDBOX_IMAGE=reg.example/corral-sandbox:1")
    assert " -t reg.example/corral-sandbox:1 " in sandbox and " -t reg.example/corral:1 " in runtime


def test_a_base_pinned_by_digest_is_built_as_given() -> None:
    pinned = "python:3.11-slim@sha256:" + "0" * 64  # a made-up digest: only the text is checked
    built = _make_image(f"IMAGE_BASE={pinned}")
    assert len(built) == 2
    for line in built:
        assert f"--build-arg BASE={pinned} " in line
    # and the Dockerfile uses it whole: FROM ${BASE}, never with a tag or digest of its own appended
    assert {parent for parent, _ in _stages().values() if "BASE" in parent} == {"${BASE}"}


def test_the_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split("\n", 2)[:2] == [
        " " * 33 + "Apache License",
        " " * 27 + "Version 2.0, January 2004",
    ]
    assert "END OF TERMS AND CONDITIONS" in text


def _pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for doc in docs:
        spec = doc.get("spec", {})
        template = spec.get("jobTemplate", {}).get("spec", spec).get("template")
        if isinstance(template, dict):
            specs.append((f"{doc['kind']}/{doc['metadata']['name']}", template["spec"]))
    return specs


def test_the_chart_runs_production_image_and_nothing_of_the_sandbox() -> None:
    """Every corral container the chart renders (services, Jobs, the webhook) runs production's
    image, which has no sandbox, and none of them asks for the sandbox's commands."""
    assert CHART_VALUES["image"]["repository"] == "corral/corral"  # what `make image` tags IMAGE
    docs = render({"preUpgradeChecker.jobEnabled": "true", "v2Admission.enabled": "true"})
    containers = [
        (where, container)
        for where, spec in _pod_specs(docs)
        for container in [*spec.get("initContainers", []), *spec["containers"]]
    ]
    corral = [(where, c) for where, c in containers if not c["image"].startswith("nats")]
    assert len({where for where, _ in corral}) >= 8, [where for where, _ in corral]
    assert {c["image"] for _, c in corral} == {"corral/corral:local"}
    for where, container in corral:
        argv = [*container.get("command", []), *container.get("args", [])]
        assert not {"sandbox", "demo", "run"} & set(argv[1:2]), (where, argv)
        assert not [arg for arg in argv if "sandbox" in arg or "corral_cli" in arg], (where, argv)
