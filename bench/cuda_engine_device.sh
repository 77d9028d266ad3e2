#!/bin/bash
# The CUDA engine on a lent GPU machine, in one call: build, the GPU tests (tests/test_emu_cuda.py,
# the arena test, the core's CUDA self-test), the bench (bench/cuda_engine.py: latency, the bare
# kernel, the engine's throughput sweep, engine variants side by side), the conformance suite
# against the CUDA engine, and compute-sanitizer memcheck on short engine runs (device objects
# carved from an arena allocated before the engine's launch: GICBENCH_CUDA_ENGINE_ARENA_MB).
# Logs and bench.json go to $OUT (default /tmp/cuda-engine). Each step has a time limit.
#   BENCH_ARGS='--ctas 16 --qps 64,1024' bash bench/cuda_engine_device.sh
#   ONLY='bench|memcheck' bash bench/cuda_engine_device.sh     (only those steps)
set -u
O=${OUT:-/tmp/cuda-engine}; mkdir -p "$O"
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -2; nproc; } \
  > "$O/machine.txt" 2>&1
rm -rf /tmp/gs
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs . > "$O/build.log" 2>&1 \
  || { tail -30 "$O/build.log"; exit 1; }
export PYTHONPATH=/tmp/gs
step() {  # step NAME SECONDS CMD...: run with a limit, log to $O/NAME.log, print the tail
  local name=$1 secs=$2; shift 2
  [[ "$name" =~ ^(${ONLY:-.*})$ ]] || return 0
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" > "$O/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0)) s"; tail -"${TAILN:-6}" "$O/$name.log"
}
PYT="python3 -m pytest -q -p no:cacheprovider -rs"
step gpu_tests ${T_TESTS:-60} $PYT tests/test_emu_cuda.py tests/test_emu_cuda_arena.py \
  tests/conformance/test_emu_core_cuda.py
TAILN=45 step bench ${T_BENCH:-110} python3 bench/cuda_engine.py --json "$O/bench.json" ${BENCH_ARGS:-}
step conformance ${T_CONF:-60} $PYT tests/conformance/test_conformance.py -k cuda
GICBENCH_CUDA_ENGINE_ARENA_MB=64 GICBENCH_CUDA_ENGINE_TIMEOUT_S=120 TAILN=12 step memcheck ${T_MEMCHECK:-60} \
  compute-sanitizer --tool memcheck --target-processes all \
  $PYT tests/test_emu_cuda.py -k "(posts_and and device) or many_qps"
