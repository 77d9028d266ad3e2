#!/bin/bash
# Every GPU path of gicbench in ONE call on a lent one-GPU H200 machine, under a deadline, for
# sessions with little device time: build; MPS (two ranks share the GPU: without it their kernels
# time-slice); the DOCA handlers and mini-gda side by side on the CPU engine (bench/doca_vs_gda.py
# reports the ratios); mini-gda on the CUDA engine with GPU-resident queues; the CUDA engine's
# doorbell-to-CQE latency (bench/cuda_engine.py); mini-gda's round trip under MPS; then the
# gpu-marked tests while time is left. Never changes the GPU's clocks.
#   bash bench/device_session.sh            (needs .cache/gpunetio/<version>, see make setup)
#   ONLY='build|compile|cudaeng_gda' bash bench/device_session.sh   (only those steps)
# Everything lands in $OUT/session.tgz (logs, run JSON, traces' analyze output) and
# $OUT/summary.txt, refreshed after every step, so a cut-off call still returns what ran.
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-380}))
OUTDIR=${OUT:-/tmp/session-out}; O=/tmp/session; mkdir -p "$O/runs" "$O/tr" "$OUTDIR"
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
pack() { cp "$O/summary.txt" "$OUTDIR/" 2>/dev/null; tar czf "$OUTDIR/session.tgz" -C "$O" . 2>/dev/null; }
step() {  # step NAME SECONDS CMD...: stdout to runs/NAME.json, stderr to runs/NAME.err
  local name=$1 t=$2; shift 2
  [[ "$name" =~ ^(${ONLY:-.*})$ ]] || return 0  # ONLY: a regex of step names (a short re-check)
  local left=$((DEADLINE - SECONDS)); [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -le 5 ]; then echo "== $name: skipped (deadline)" >> "$O/summary.txt"; return; fi
  local t0=$SECONDS
  timeout -k 3 "$t" "$@" > "$O/runs/$name.json" 2> "$O/runs/$name.err"; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0)) s: $*" >> "$O/summary.txt"
  [ $rc -eq 0 ] || tail -4 "$O/runs/$name.err" | sed 's/^/   /' >> "$O/summary.txt"
  pack
}
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nproc; } > "$O/machine.txt" 2>&1
rm -rf /tmp/gs  # pip --target leaves an earlier install (another checkout's, on a warm machine) in place
step build 150 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
export PYTHONPATH=/tmp/gs
VER=$(cd "$ROOT/.cache/gpunetio" 2>/dev/null && dirname */VERSION | head -1)
export GICBENCH_GPUNETIO_DIR="$ROOT/.cache/gpunetio/$VER" GICBENCH_DOCA_CACHE=/tmp/doca-cubin
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d \
  && echo "== mps started" >> "$O/summary.txt"
# Compile once, in parallel, before two ranks would each compile the same thing.
step compile 150 python3 -c "
import concurrent.futures as cf
from gicbench.fabric.emu.cuda_engine import compile_engine
from gicbench.submit.doca.build import compile_cubin
from gicbench.submit.gpu.build import module
with cf.ThreadPoolExecutor(4) as ex:
    fs = [ex.submit(compile_engine, 'sm_90'), ex.submit(compile_cubin)]
    fs += [ex.submit(module, o) for o in ('gpu-fence', 'sys-fence')]
    print([str(f.result())[:80] for f in fs])"
G="mpiexec --bind-to none -n 2 python3 -m gicbench run --timeout 5 --json --quiet --sq-depth 256 -b 8"
MAIN="single-op msg-rate completion-scope --pattern fan-out --modes issue,put_completion -n 2000 \
-w 200 -q 4 -t 4 --batch 1 --messages 50000"
for h in gpu-sm-db gpu-sm-no-dbr gpu-sm-bf cpu-proxy cpu-proxy-free-flow; do
  step "main_doca_$h" 45 $G $MAIN --progress thread --submitter doca --doca-handler "$h" \
    -o "$O/tr/main_$h"
done
for o in gpu-fence sys-fence; do
  step "main_gpu_$o" 45 $G $MAIN --progress thread --submitter gpu --ordering "$o" -o "$O/tr/main_$o"
done
python3 bench/doca_vs_gda.py "$O/runs" "$O/doca_vs_gda" > "$O/doca_vs_gda.txt" 2>&1; pack
step cudaeng_gda 60 $G single-op msg-rate --pattern fan-out --modes issue,put_completion -n 2000 \
  -w 200 -q 4 -t 128 --batch 32 --publish warp --messages 50000 --submitter gpu \
  --engine cuda --queues device -o "$O/tr/cudaeng_gda"
step cpueng_gda 45 $G single-op msg-rate --pattern fan-out --modes issue,put_completion -n 2000 \
  -w 200 -q 4 -t 128 --batch 32 --publish warp --messages 50000 --submitter gpu \
  --progress thread -o "$O/tr/cpueng_gda"
step rtt_gda_mps 40 $G single-op --modes round_trip -n 2000 -w 200 --progress thread \
  --submitter gpu -o "$O/tr/rtt_gda_mps"
step engine_latency 70 python3 bench/cuda_engine.py --skip bare,rate --pings 2000 \
  --json "$O/engine_latency.json"
for d in "$O"/tr/*; do python3 -m gicbench analyze "$d" > "$d.analyze.txt" 2>&1; done; pack
cd "$ROOT" && for f in test_doca_submitter_gpu test_emu_cuda test_gpu_device test_proxy_gpu; do
  step "pytest_$f" 120 python3 -m pytest -p no:cacheprovider -q -rs -x -m gpu \
    -k "not end_to_end" "tests/$f.py"
done
# loaded-rtt and payload through mini-proxy and mini-gda on the same experiment (issue 13): 64
# background CTAs per endpoint (proxy: GPU producers, T4/R32/B16, baseline handoff so its probe
# can share a ring; gpu: one QP per CTA, batches of 16), then goodput 8 B..1 MiB; the side by
# side is `gicbench analyze PROXY GPU --on ...` (ratio columns gpu/proxy). Steps load_*.
L="mpiexec --bind-to none -n 2 python3 -m gicbench run --timeout 5 --json --quiet --progress thread"
LR="loaded-rtt -b 8 -n 1000 -w 100 --background 64 --batch 16"
PL="payload --point-bytes 64M --messages 20000"
step load_compile 60 python3 -c "
import concurrent.futures as cf
from gicbench.submit.gpu.build import module
from gicbench.submit.gpu.loaded import module as loaded
with cf.ThreadPoolExecutor(2) as ex:
    fs = [ex.submit(f, o) for f in (module, loaded) for o in ('gpu-fence', 'sys-fence')]
    print([str(f.result())[:60] for f in fs])"
# sys-fence: with gpu-fence the CPU engine once read a stale WQE on a probe's private QP under
# this load (docs/gpu-loaded.md); the system-scope ordering ran clean.
step load_rtt_gpu 40 $L $LR --submitter gpu --ordering sys-fence -o "$O/tr/load_rtt_gpu"
step load_rtt_proxy 40 $L $LR --submitter proxy --producer gpu --handoff baseline --workers 4 \
  --rings 32 -o "$O/tr/load_rtt_proxy"
step load_payload_gpu 40 $L $PL --submitter gpu -o "$O/tr/load_payload_gpu"
step load_payload_gpu_warp 40 $L $PL --submitter gpu -t 32 --publish warp \
  -o "$O/tr/load_payload_gpu_warp"
step load_payload_proxy 40 $L $PL --submitter proxy -o "$O/tr/load_payload_proxy"
for r in load_rtt_gpu load_rtt_proxy load_payload_gpu load_payload_gpu_warp load_payload_proxy; do
  step "load_analyze_$r" 20 python3 -m gicbench analyze "$O/tr/$r"
done
step load_side_rtt 20 python3 -m gicbench analyze "$O/tr/load_rtt_proxy" "$O/tr/load_rtt_gpu" \
  --on size,queue
step load_side_payload 20 python3 -m gicbench analyze "$O/tr/load_payload_proxy" \
  "$O/tr/load_payload_gpu" "$O/tr/load_payload_gpu_warp" --on size
cd "$ROOT" && step load_pytest 60 python3 -m pytest -p no:cacheprovider -q -rs -x -m gpu \
  tests/test_gpu_loaded_device.py
echo "== done at $SECONDS s" >> "$O/summary.txt"; pack
echo quit | nvidia-cuda-mps-control 2>/dev/null
cat "$O/summary.txt"; cat "$O/doca_vs_gda.txt" 2>/dev/null | head -40
