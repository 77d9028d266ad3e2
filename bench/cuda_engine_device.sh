#!/bin/bash
# The CUDA engine on a lent GPU machine, in one call: build, the GPU tests (the conformance
# suite against the CUDA engine, tests/test_emu_cuda.py, the nvcc/GPU wire tests), the bench
# (bench/cuda_engine.py) and compute-sanitizer memcheck on a small engine run. Logs and
# bench.json go to $OUT (default /tmp/cuda-engine). Each step has a time limit.
#   bash bench/cuda_engine_device.sh
set -u
O=${OUT:-/tmp/cuda-engine}; mkdir -p "$O"
export PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version; nproc; } > "$O/machine.txt" 2>&1
rm -rf /tmp/gs
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs . > "$O/build.log" 2>&1 \
  || { tail -30 "$O/build.log"; exit 1; }
export PYTHONPATH=/tmp/gs
step() {  # step NAME SECONDS CMD...: run with a limit, log to $O/NAME.log, print the tail
  local name=$1 secs=$2; shift 2
  timeout -k 5 "$secs" "$@" > "$O/$name.log" 2>&1; echo "== $name rc=$?"; tail -${TAILN:-6} "$O/$name.log"
}
PYT="python3 -m pytest -q -p no:cacheprovider -rs"
step gpu_tests 100 $PYT tests/test_emu_cuda.py tests/conformance/test_emu_core_cuda.py tests/test_wire_cuda.py
step conformance 150 $PYT tests/conformance/test_conformance.py -k cuda
TAILN=40 step bench 230 python3 bench/cuda_engine.py --json "$O/bench.json" ${BENCH_ARGS:-}
GICBENCH_CUDA_ENGINE_TIMEOUT_S=120 step memcheck 90 compute-sanitizer --tool memcheck \
  --target-processes all $PYT tests/test_emu_cuda.py -k "posts_and and device"
python3 -m gicbench doctor 2>&1 | grep -i -A1 "mps" > "$O/doctor_mps.txt"
