#!/bin/bash
# On a GPU machine without network access (CuPy, nvcc, CMake, nanobind and scikit-build-core
# preinstalled, as on the lent H200 machines): build gicbench in place, run the CUDA/GPU tests
# and the emu suites, then the emu engine benchmark. Results go to $OUT (default /tmp/gicbench-gpu).
#   bash bench/gpu_machine.sh
set -u
O=${OUT:-/tmp/gicbench-gpu}; mkdir -p "$O"
export PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version; python3 --version; nproc; } > "$O/machine.txt" 2>&1
python3 -m pip install --no-build-isolation --no-deps --target /tmp/gicbench-site . \
  > "$O/build.log" 2>&1 || { tail -50 "$O/build.log"; exit 1; }
export PYTHONPATH=/tmp/gicbench-site${PYTHONPATH:+:$PYTHONPATH}
python3 -m gicbench doctor > "$O/doctor.txt" 2>&1
# rdma-core's headers are usually absent there: the wire tests against them run in CI instead.
python3 -m pytest -q -p no:cacheprovider -rs tests/test_wire_cuda.py tests/test_wire_roundtrip.py \
  tests/conformance tests/test_emu_fabric.py tests/test_host_submitter.py > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$O/tests.log"
python3 bench/emu_engine.py > "$O/emu_engine.txt" 2>&1; echo "bench rc=$?"; cat "$O/emu_engine.txt"
