#!/bin/bash
# The CUDA engine's next device call, in ONE call of about 5-6 minutes on
# nvidia-h200-x2 (one GPU used), every step under a deadline:
#   build; compile (the engine, the bench kernels and every variant below, in parallel);
#   conformance (the conformance suite and the GPU tests against the CUDA engine: the counters
#   now come from per-warp rows in GPU memory, so this is the counters() check);
#   memcheck (compute-sanitizer on a short engine run: GPU-memory queues, CQs and MR, no error
#   records; objects carved from an arena allocated before the launch);
#   rate (bench/cuda_engine.py: the bare kernel and every RATE variant at 8/16/32 CTAs x 64 and
#   1,024 QPs, side by side in one process);
#   latency (1 QP and 16,384 QPs configured, for every LAT variant; host-resident queues and the
#   CPU engine once);
#   conformance_variant (the conformance suite against the combined variant, CONF_DEFINES through
#   GICBENCH_CUDA_ENGINE_DEFINES; last, so it runs only if time is left).
# Predictions: bench/cuda_engine_next.md (write the measured figures beside them).
#   OUT=/path bash bench/cuda_engine_next.sh         ($OUT: summary.txt, logs, rate.json, ...)
#   ONLY='build|compile|rate' bash bench/cuda_engine_next.sh    (a regex of step names)
# Variants (cuda/emu_engine.cu's switches; r4 = the default engine): see the .md for why each
# keeps the engine's guarantees.
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-560}))
O=${OUT:-/tmp/cuda-engine-next}; mkdir -p "$O"
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
G=8+16+32:64+1024  # CTAs x QPs of each throughput variant
RATE=${RATE:-"r4:$G r4@SEG_COUNTERS=1:$G r4@SCOPE_GPU=1:$G r4@CTL_WARP=1:$G r4@CTL_PACE_NS=2000:$G
 r4@CQ_REGS=1:$G r4@SCOPE_GPU=1@CTL_WARP=1@CQ_REGS=1:$G r8@SCOPE_GPU=1@CTL_WARP=1@CQ_REGS=1:16+32:64+1024"}
LAT=${LAT:-"r4 r4@IDLE_PACE_NS=200 r4@IDLE_PACE_NS=1000 r4@CTL_WARP=1
 r4@SCOPE_GPU=1@CTL_WARP=1@CQ_REGS=1@IDLE_PACE_NS=200"}
# The combined variant under the conformance suite (last: runs if time is left).
CONF_DEFINES=${CONF_DEFINES:-SCOPE_GPU=1,CTL_WARP=1,CQ_REGS=1,IDLE_PACE_NS=200}
. "$(dirname "$0")/step.sh"
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -2; nproc
  git log --oneline -1; } > "$O/machine.txt" 2>&1
rm -rf /tmp/gs  # pip --target leaves an earlier install in place
step build 150 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
export PYTHONPATH=/tmp/gs
B="python3 bench/cuda_engine.py"
# Every cubin at once (the cache then serves the steps below): the engine, and the bench with
# all parts skipped (it compiles its kernels and the variants, then stops).
CC="python3 -c 'from gicbench.fabric.emu.cuda_engine import compile_engine as c; print(c(\"sm_90\"))'"
step compile 120 bash -c "$CC & GICBENCH_CUDA_ENGINE_DEFINES=$CONF_DEFINES $CC & \
$B --skip latency,bare,rate --variants $(echo $RATE $LAT) & wait"
PYT="python3 -m pytest -q -p no:cacheprovider -rs -o faulthandler_timeout=60"
step conformance 100 $PYT tests/conformance/test_conformance.py tests/test_emu_cuda.py \
  tests/test_emu_cuda_arena.py tests/conformance/test_emu_core_cuda.py tests/test_cuda_engine_counters.py \
  -k "cuda or arena or batch or counters"
# memcheck: the engine alone, the host its submitter (bench/cuda_engine_memcheck.py: the tool runs
# one kernel at a time, so a submitter kernel would wait behind the persistent engine for ever).
# "ERROR SUMMARY: 0 errors" is the goal of the counter change.
GICBENCH_CUDA_ENGINE_ARENA_MB=64 GICBENCH_CUDA_ENGINE_TIMEOUT_S=60 TAILN=14 step memcheck ${MEMCHECK_S:-120} \
  compute-sanitizer --tool memcheck --target-processes all --print-limit 20 \
  python3 bench/cuda_engine_memcheck.py --ops 60
TAILN=40 step rate 160 $B --skip latency --laps 4 --json "$O/rate.json" --variants $RATE
TAILN=20 step latency 150 $B --skip bare,rate --pings 1000 --latency-variants all \
  --json "$O/latency.json" --variants $LAT
GICBENCH_CUDA_ENGINE_DEFINES=$CONF_DEFINES step conformance_variant 90 $PYT \
  tests/conformance/test_conformance.py tests/test_emu_cuda.py -k cuda
echo "== done $SECONDS s" | tee -a "$O/summary.txt"
