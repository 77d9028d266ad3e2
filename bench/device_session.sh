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
# ipc_*: the CUDA engine through MPI with peers in other processes (CUDA IPC of device MRs and
# CQs). IPC_GPUS=2 (default, nvidia-h200-x2): one rank per GPU, NVLink peer access, MPS stopped
# first (not needed); IPC_GPUS=1: both ranks on GPU 0 under MPS. ipc_mps_diag: which CUDA call
# of bring-up blocks while another MPS client's engine kernel runs (bench/mps_bringup.py).
MPS_ON="mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1"
IG=${IPC_GPUS:-2}
if [ "$IG" = 1 ]; then IPC_ENV="env CUDA_VISIBLE_DEVICES=0"; IPC_MPS=$MPS_ON
else IPC_ENV="env"; IPC_MPS="(echo quit | nvidia-cuda-mps-control || true); sleep 2"; fi
step ipc_mps 15 bash -c "$IPC_MPS; nvidia-smi topo -m; echo get_default_active_thread_percentage \
  | nvidia-cuda-mps-control"
step ipc_test_${IG}g 90 $IPC_ENV mpiexec --bind-to none -n 2 python3 -m pytest -p no:cacheprovider -q -rs \
  -x tests/mpi/test_emu_cuda_ipc_mpi.py
IE="--engine cuda --queues device"
step ipc_gda_rtt_${IG}g 45 $IPC_ENV $G single-op --modes issue,put_completion,round_trip -n 2000 -w 200 \
  --submitter gpu $IE -o "$O/tr/ipc${IG}g_gda_rtt"
step ipc_gda_${IG}g 60 $IPC_ENV $G $MAIN --submitter gpu $IE -o "$O/tr/ipc${IG}g_gda"
step ipc_doca_${IG}g 60 $IPC_ENV $G $MAIN --submitter doca --doca-handler gpu-sm-db $IE -o "$O/tr/ipc${IG}g_doca"
step ipc_host_${IG}g 45 $IPC_ENV $G single-op msg-rate --modes issue,put_completion,round_trip -n 2000 \
  -w 200 --messages 50000 --submitter host --engine cuda --queues host -o "$O/tr/ipc${IG}g_host"
for d in "$O"/tr/ipc${IG}g_*; do [ -d "$d" ] && python3 -m gicbench analyze "$d" > "$d.analyze.txt" 2>&1; done
step ipc_mps_diag 75 bash -c "$MPS_ON; CUDA_VISIBLE_DEVICES=0 timeout -k 3 65 mpiexec --bind-to none \
  -n 2 python3 bench/mps_bringup.py --out /tmp/mpsdiag --block-s 3 --dump-s 45"
echo "== done at $SECONDS s" >> "$O/summary.txt"; pack
echo quit | nvidia-cuda-mps-control 2>/dev/null
cat "$O/summary.txt"; cat "$O/doca_vs_gda.txt" 2>/dev/null | head -40
