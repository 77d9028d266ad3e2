"""The VM test group: runs only inside the Soft-RoCE guest (tests/vm/run_vm.sh sets
GICBENCH_VM=1). On the host these files are not collected at all: `make test-vm` is the way to
run them, and it fails loudly when the guest cannot boot."""

from __future__ import annotations

import os

import pytest

IN_VM = os.environ.get("GICBENCH_VM") == "1"
collect_ignore_glob = [] if IN_VM else ["test_*.py"]


@pytest.fixture(scope="session")
def rxe_device() -> str:
    return os.environ.get("GICBENCH_VM_DEVICE", "rxe0")
