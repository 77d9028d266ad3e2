#!/bin/bash
# On a GPU machine without network access (CuPy, nvcc, CMake, nanobind preinstalled, as on the
# lent H200 machines), from a copy of the repository that holds the extracted GPUNetIO headers
# (.cache/gpunetio/<version>/, made by `make setup` here) and, optionally, a prebuilt cubin
# (.cache/doca-cubin/): build gicbench, then run DOCA GPUNetIO's device verbs on emu queues for
# every NIC handler (tests/test_doca_device.py), one process per handler so that a fault in one
# cannot poison the others. Results: $OUT/doca-report.jsonl (one line per case) and $OUT/doca.log.
#   bash bench/doca_device.sh
set -u
O=${OUT:-/tmp/gicbench-doca}; mkdir -p "$O"
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
{ nvidia-smi -L; nvcc --version | tail -1; python3 -m pip show nvidia-nvshmem-cu13 2>/dev/null \
  | head -2; } > "$O/machine.txt" 2>&1
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gicbench-site . \
  > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
export PYTHONPATH=/tmp/gicbench-site${PYTHONPATH:+:$PYTHONPATH}
VER=$(cd "$ROOT/.cache/gpunetio" && dirname */VERSION | head -1)
export GICBENCH_GPUNETIO_DIR="$ROOT/.cache/gpunetio/$VER" GICBENCH_DOCA_CACHE="$ROOT/.cache/doca-cubin"
export DOCA_DEVICE_REPORT="$O/doca-report.jsonl"
rm -f "$DOCA_DEVICE_REPORT"
mkdir -p /tmp/doca-tests && cp tests/test_doca_device.py /tmp/doca-tests/ && cd /tmp/doca-tests
for id in gpu_sm_db-cq_64b gpu_sm_db-cq_64b_collapsed gpu_sm_no_dbr-cq_64b cpu_proxy-cq_64b \
          cpu_proxy_free_flow-cq_64b gpu_sm_bf-cq_64b; do
  echo "== $id"
  timeout -k 5 ${DOCA_CASE_TIMEOUT:-60} python3 -m pytest -p no:cacheprovider -q -rs \
    "test_doca_device.py::test_doca_posts_on_emu[$id]" 2>&1 | tail -${DOCA_LOG_LINES:-25}
  echo "rc=${PIPESTATUS[0]}"
done 2>&1 | tee "$O/doca.log"
