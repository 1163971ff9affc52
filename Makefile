# cubicle — the two commands: `make drill` and `make test`. Each does all the set-up it needs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
CUBICLE := $(PY) -m cubicle.orchestrator.cli
PYTEST_ARGS ?=

.PHONY: help host venv lock newest engine image vm-host vm-image drill conformance test unit attack bench lint fmt

help:
	@echo "make drill   run the offline keyless drill on the default (Docker) backend"
	@echo "make conformance  every shipped task (tasks/) for every provider on every available backend, with tables"
	@echo "make test    run the whole test suite"
	@echo "make unit    the fast loop: tests that need neither Docker nor libvirt (< 2 min)"
	@echo "make attack  run the attack regression tests (marker attack)"
	@echo "make bench   run the benchmarks (ours vs peers, with ratios)"
	@echo "make lint    ruff + mypy"
	@echo "make fmt     ruff format + ruff check --fix (rewrites files)"
	@echo "make vm-image  build the VM guest image (libvirt/QEMU backend)"
	@echo "make lock    write requirements/*.txt afresh (exact versions and hashes; make test installs them)"
	@echo "make newest  the wire-conformance tests against the newest openai the bounds allow"

host:
	scripts/ensure-host-packages

# the venv holds exactly the locked versions (requirements/*.txt, with hashes)
venv: host
	scripts/ensure-venv $(VENV)

# write the lock afresh from pyproject's bounds (then run make newest and make test)
lock:
	scripts/lock $(VENV)

# upstream drift: the tests marked `newest` against the newest wire packages the bounds allow,
# in a throw-away venv (not part of make test, which stays reproducible from the lock)
newest: host
	scripts/newest

engine: venv
	VENV_PY=$(PY) scripts/ensure-docker

image: engine
	$(CUBICLE) image build

# The VM backend: libvirt + the VM image. Where libvirt cannot run, say why and go on: the VM
# tests then skip with that reason. Where it runs, a failing build fails the target.
vm-host: venv
	scripts/ensure-libvirt

vm-image: venv
	@if scripts/ensure-libvirt; then $(CUBICLE) image build --backend vm; \
	else echo "make: libvirt cannot run here; the VM tests will skip (reason above)"; fi

drill: image
	$(CUBICLE) drill

# Every shipped task with every loop of every provider it has a script for, on every backend that
# runs here: the conformance tables (one with a column per provider). The VM backend runs where
# libvirt can, only the desktop task for every provider, to bound its time (TCG guests are slow:
# expect tens of minutes).
conformance: image vm-image
	$(CUBICLE) drill --all --provider all --backend docker
	@if scripts/ensure-libvirt >/dev/null 2>&1; then \
	$(CUBICLE) drill --task desktop --provider all --backend vm; \
	else echo "make: libvirt cannot run here; conformance covered the Docker backend only"; fi

test: lint image vm-image
	$(PY) -m pytest $(PYTEST_ARGS)

# the fast loop: no Docker engine, no libvirt, no image build (pytest markers docker, vm and slow
# deselected; Xvfb tests stay). UNIT_MARKERS is the one definition of that selection. Its tests
# run on UNIT_WORKERS pytest-xdist workers (each test's Xvfb, agent socket, temp folders and
# ports are its own; most of the loop's time is waiting, not CPU); UNIT_WORKERS=0: one process.
UNIT_MARKERS := not docker and not vm and not slow
UNIT_WORKERS ?= 2
unit: venv
	$(PY) -m pytest -n $(UNIT_WORKERS) -m "$(UNIT_MARKERS)" $(PYTEST_ARGS)

# the regression tests of attacks on the sandboxes (pytest marker "attack"; also part of make test)
attack: image vm-image
	$(PY) -m pytest -m attack $(PYTEST_ARGS)

bench: image vm-image
	$(PY) -m tests.bench

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

fmt: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
