#!/bin/bash
# DOCA GPUNetIO against mini-gda on one GPU, in ONE run: single-op (issue,
# put+completion), completion-scope and msg-rate through `mpiexec -n 2 gicbench run`, on the
# emulated NIC's CPU engine (engine threads, host-mapped queues), the same QP configuration for
# every submitter (RC, 4 QPs, --sq-depth 256, 8-byte inline writes, pattern fan-out of 2 ranks =
# one sender, one receiver): --submitter gpu with orderings gpu-fence and sys-fence,
# --submitter doca with every NIC handler (exclusive sharing, thread scope, 64B CQ; the 32-thread
# rate shares one QP: mini-gda --publish thread, DOCA --doca-sharing gpu). Then the side-by-side report (bench/doca_vs_gda.py: ratios per handler
# and per ordering) and the doca submitter's GPU tests. Never changes the GPU's clocks.
# Carry-ready: from a copy of the repository holding .cache/gpunetio/<version>/ (make setup
# extracts it), `bash bench/doca_vs_gda.sh`; it builds into /tmp/gs ($GICBENCH_SITE) unless that
# holds gicbench already.
# Results: $OUT/summary.txt, $OUT/doca_vs_gda.md (+ .json), $OUT/runs/*.json, $OUT/tests.log.
set -u
O=${OUT:-/tmp/doca-vs-gda}; mkdir -p "$O/runs"
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nproc; nvcc --version | tail -1; } \
  > "$O/machine.txt" 2>&1
GS=${GICBENCH_SITE:-/tmp/gs}  # where the package is installed (built here unless it exists)
if [ ! -d "$GS/gicbench" ]; then
  python3 -m pip install -q --no-build-isolation --no-deps --target "$GS" . > "$O/build.log" 2>&1 \
    || { tail -30 "$O/build.log"; exit 1; }
fi
export PYTHONPATH=$GS${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${GICBENCH_GPUNETIO_DIR:-}" ]; then
  VER=$(cd "$ROOT/.cache/gpunetio" 2>/dev/null && dirname */VERSION | head -1)
  export GICBENCH_GPUNETIO_DIR="$ROOT/.cache/gpunetio/$VER"
fi
export GICBENCH_DOCA_CACHE=${GICBENCH_DOCA_CACHE:-/tmp/doca-cubin}
step() {  # step NAME SECONDS CMD...: one command, its output kept, never more than SECONDS
  local name=$1 t=$2; shift 2
  echo "== $name: $*" >> "$O/summary.txt"
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" > "$O/runs/$name.json" 2> "$O/runs/$name.err"; local rc=$?
  echo "   rc=$rc $((SECONDS - t0)) s" >> "$O/summary.txt"; echo "$name rc=$rc $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || tail -5 "$O/runs/$name.err"
}
# Build the DOCA cubin once (both ranks would otherwise compile it at once).
step cubin 180 python3 -c "from gicbench.submit.doca.build import compile_cubin; print(compile_cubin())"
G="mpiexec --bind-to none -n 2 python3 -m gicbench run --progress thread --timeout 5 --json --quiet \
--pattern fan-out --sq-depth 256 -b 8"
# One run per variant for the main figures (-q 4 for all three experiments: single-op posts on
# the first QP, completion-scope walks 1, 2, 4 QPs, msg-rate: 4 threads, one per QP), one for
# 32 threads sharing one QP.
MAIN="single-op msg-rate completion-scope --modes issue,put_completion -n 2000 -w 200 -q 4 -t 4 \
--batch 1 --messages 50000"
R32="msg-rate -t 32 -q 1 --batch 1 --messages 5000"
for o in gpu-fence sys-fence; do
  step "main_gpu_$o" 75 $G $MAIN --submitter gpu --ordering "$o" -o "$O/tr/main_$o"
  step "r32_gpu_$o" 45 $G $R32 --submitter gpu --ordering "$o" --publish thread -o "$O/tr/r32_$o"
done
for h in gpu-sm-db gpu-sm-no-dbr gpu-sm-bf cpu-proxy cpu-proxy-free-flow; do
  step "main_doca_$h" 75 $G $MAIN --submitter doca --doca-handler "$h" -o "$O/tr/main_$h"
  step "r32_doca_$h" 45 $G $R32 --submitter doca --doca-handler "$h" --doca-sharing gpu \
    -o "$O/tr/r32_$h"
done
python3 bench/doca_vs_gda.py "$O/runs" "$O/doca_vs_gda" 2>&1 | tee "$O/report.txt"
# The doca submitter's in-process GPU tests (the runs above are its end-to-end test).
mkdir -p /tmp/doca2-tests && cp tests/test_doca_submitter_gpu.py /tmp/doca2-tests/ && cd /tmp/doca2-tests \
  && timeout -k 5 "${DOCA_TEST_TIMEOUT:-120}" python3 -m pytest -p no:cacheprovider -q -rs -x \
    -k "not end_to_end" test_doca_submitter_gpu.py > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -15 "$O/tests.log"
