#!/bin/bash
# mini-gda's issue beside the bare mechanism, in ONE call on a lent one-GPU H200 machine: build;
# MPS (two ranks share the GPU, and the CUDA engine's kernel runs beside the submitter's); compile
# the CUDA engine and every ordering's module once; bench/gda_probe.py on GPU-memory queues
# (--engine cuda --queues device) and on the CPU engine's host-mapped queues; the lock
# publication that used to time out (32 threads, one QP); the gpu-marked lock tests.
#   bash bench/gda_probe.sh          (results in $OUT: gda_probe_*.md/json, summary.txt; the
#                                     whole call within DEADLINE_S, default 190 s)
set -u
OUTDIR=${OUT:-/tmp/gda-probe}; mkdir -p "$OUTDIR"
S="$OUTDIR/summary.txt"; : > "$S"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
DEADLINE=$((SECONDS + ${DEADLINE_S:-190}))  # the whole call, whatever each step may take
step() {  # step NAME SECONDS CMD...: output to $OUTDIR/NAME.log, rc and time to summary.txt
  local name=$1 t=$2 t0=$SECONDS; shift 2
  local left=$((DEADLINE - SECONDS)); [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -le 5 ]; then echo "== $name: skipped (deadline)" >> "$S"; return; fi
  timeout -k 3 "$t" "$@" > "$OUTDIR/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0)) s" >> "$S"
  [ $rc -eq 0 ] || tail -6 "$OUTDIR/$name.log" | sed 's/^/   /' >> "$S"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> "$S" 2>&1
rm -rf /tmp/gs  # pip --target keeps an earlier install in place
step build 120 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
export PYTHONPATH=/tmp/gs
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d \
  && echo "== mps started" >> "$S"
# Compile once (CuPy's disk cache), before two ranks would each compile the same modules.
step compile 90 python3 -c "
import concurrent.futures as cf
from gicbench.fabric.emu.cuda_engine import compile_engine
from gicbench.submit.gpu.build import module
from gicbench.submit.gpu.params import ORDERINGS
with cf.ThreadPoolExecutor(4) as ex:
    fs = [ex.submit(compile_engine, 'sm_90')] + [ex.submit(module, o) for o in ORDERINGS]
    print([str(f.result())[:60] for f in fs])"
for q in device host; do
  step "probe_$q" 100 python3 bench/gda_probe.py --queues "$q" -n 2000 \
    --json "$OUTDIR/gda_probe_$q.json" --md "$OUTDIR/gda_probe_$q.md"
done
step lock_cli 40 mpiexec --bind-to none -n 2 python3 -m gicbench run --submitter gpu \
  --progress thread --timeout 5 --publish lock msg-rate -b 8 -t 32 -q 1 --batch 1 \
  --messages 100000 --quiet -o /tmp/gda-lock
step lock_tests 60 python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/test_gda_lock.py
echo quit | nvidia-cuda-mps-control 2>/dev/null
cat "$S"; cat "$OUTDIR/gda_probe_device.md" "$OUTDIR/gda_probe_host.md" 2>/dev/null
tail -15 "$OUTDIR/lock_cli.log"
