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
# ---- doca_ steps (docs/doca.md): round trips with a DOCA responder per handler, the
# 32-thread shared-QP rate per sharing mode and scope, mini-gda beside them, the CUDA engine.
# Ranks take GPU (rank mod GPUs): on nvidia-h200-x2 one rank per GPU. ONLY='build|compile|doca_.*'
D="$G --pattern pairs"
DRT="single-op msg-rate --modes issue,put_completion,round_trip -n 1000 -w 100 -t 32 -q 1 \
--batch 1 --messages 5000"
# In-process round trips with a DOCA responder (CPU engine threads). faulthandler: a hung test
# prints every thread's stack before the step's timeout kills it.
PT="python3 -m pytest -p no:cacheprovider -q -rs -m gpu -o faulthandler_timeout=25"
step doca_pytest_rtt 40 $PT tests/test_doca_submitter_gpu.py \
  -k "round_trip_with_a_doca_responder and (gpu-sm-db or free-flow)"
# put, p, put_signal, p_signal, signal (ATOMIC_FA) timed one at a time per handler, validated
# at the target (in-process; figures in doca-ops.jsonl)
DOCA_DEVICE_REPORT=$O/doca-ops.jsonl step doca_ops 30 python3 -m pytest -p no:cacheprovider -q -rs \
  -m gpu tests/test_doca_device.py -k every_op_timed
for h in gpu-sm-db gpu-sm-no-dbr gpu-sm-bf cpu-proxy cpu-proxy-free-flow; do
  step "doca_rt_$h" 30 $D $DRT --progress thread --submitter doca --doca-handler "$h" \
    --doca-sharing gpu -o "$O/tr/doca_rt_$h"
done
step doca_rt_gda 30 $D $DRT --progress thread --submitter gpu --ordering gpu-fence --publish thread \
  -o "$O/tr/doca_rt_gda"
DSH="msg-rate -t 32 --batch 1 --messages 5000 --payload pointer --progress thread"
step doca_share_exclusive_thread 25 $D $DSH -q 32 --submitter doca --doca-sharing exclusive \
  -o "$O/tr/doca_share_exclusive_thread"
for sc in thread warp; do
  for sh in cta gpu $([ $sc = warp ] && echo exclusive); do
    step "doca_share_${sh}_$sc" 25 $D $DSH -q 1 --submitter doca --doca-sharing "$sh" \
      --doca-scope "$sc" -o "$O/tr/doca_share_${sh}_$sc"
  done
  step "doca_share_gda_$sc" 25 $D $DSH -q 1 --submitter gpu --ordering gpu-fence --publish "$sc" \
    -o "$O/tr/doca_share_gda_$sc"
done
python3 bench/doca_vs_gda.py --session "$O/runs" "$O/doca_session" > "$O/doca_session.txt" 2>&1; pack
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
# mini-gda's completion and doorbell paths (gda_*; ONLY='build|gda_.*' runs just these): the
# first mini-gda's CQ scan against the expected-CQE poll, the host-forwarded doorbell and DC, on
# one GPU (CUDA_VISIBLE_DEVICES=0 on a two-GPU machine) under MPS; bench/gda_paths.py: ratios.
export GDA1="env CUDA_VISIBLE_DEVICES=0"
step gda_compile 60 $GDA1 python3 -c "
import concurrent.futures as cf
from gicbench.submit.gpu.build import module
with cf.ThreadPoolExecutor(4) as ex:
    fs = [ex.submit(module, 'gpu-fence', p) for p in ('scan', 'expected')]
    fs += [ex.submit(module, o) for o in ('none', 'gpu-release-store', 'sys-fence')]
    print([str(f.result())[:60] for f in fs])"
GDA_MAIN="$MAIN --progress thread --submitter gpu --ordering gpu-fence"
step gda_scan 40 $GDA1 $G $GDA_MAIN --cq-poll scan -o "$O/tr/gda_scan"
step gda_expected 40 $GDA1 $G $GDA_MAIN --cq-poll expected -o "$O/tr/gda_expected"
step gda_host 40 $GDA1 $G $GDA_MAIN --doorbell host -o "$O/tr/gda_host"
step gda_dc 40 $GDA1 $G single-op msg-rate --pattern fan-out --modes issue,put_completion \
  -n 2000 -w 200 -q 4 -t 4 --batch 1 --messages 50000 --progress thread --submitter gpu \
  --transport dc -o "$O/tr/gda_dc"
python3 bench/gda_paths.py "$O/runs" "$O/gda_paths" > "$O/gda_paths.txt" 2>&1; pack
(cd "$ROOT" && step gda_pytest 60 $GDA1 python3 -m pytest -p no:cacheprovider -q -rs -x -m gpu \
  tests/test_gpu_paths_device.py)
step engine_latency 70 python3 bench/cuda_engine.py --skip bare,rate --pings 2000 \
  --json "$O/engine_latency.json"
# Where the one-QP doorbell-to-CQE time goes: the stamped engine's stages beside the floor of
# the same hand-off on this GPU (bench/cuda_engine.py --stamps).
step engine_stamps 90 python3 bench/cuda_engine.py --stamps --skip bare,rate,latency --pings 2000 \
  --json "$O/engine_stamps.json"
# mini-proxy with GPU producers (docs/proxy.md): the four proxy experiments under mpiexec -n 2
# (two ranks on the GPU under MPS, the CPU engine), payloads validated by the harness; the
# tuned-handoff loaded-rtt run (a background CTA per non-probe ring) that did not finish before.
# Just these and the GPU producer tests: ONLY='build|proxy_.*|pytest_test_proxy_gpu'.
PX="$G --submitter proxy --producer gpu --progress thread --precondition-s 0 --rings 32 --workers 4"
step proxy_gpu_suite 120 $PX single-op proxy-rate loaded-rtt payload -q 4 -e 512 -f 8 \
  --modes issue,put_completion -n 500 -w 50 --messages 5000 --sweep-workers 1,4 \
  --sweep-batch 1,16 --handoff baseline --background 64 -o "$O/tr/proxy_gpu_suite"
step proxy_gpu_loaded_tuned 60 $PX loaded-rtt --handoff tuned --queue reserved --background 31 \
  -n 500 -w 50 -o "$O/tr/proxy_gpu_loaded_tuned"
# active-connections on the GPU paths (ONLY='build|ac_.*'): mini-gda with the host thread
# ringing (the paper's configuration for the connection sweep) and mini-proxy's GPU producers,
# send-only, payloads validated by the harness; then the gpu-marked cycle tests.
AC="$G active-connections --pattern pairs --active 16,256,2048 --writes-per-visit 32 --batch 16 --messages 20000 --passes 1 --threads 16 --progress thread"
step ac_gda_host 60 $AC --submitter gpu --doorbell host -o "$O/tr/ac_gda_host"
step ac_gda_gpu 60 $AC --submitter gpu -o "$O/tr/ac_gda_gpu"
step ac_proxy_gpu 60 $AC --submitter proxy --producer gpu --workers 4 --precondition-s 0   -o "$O/tr/ac_proxy_gpu"
step ac_pytest 60 python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/test_gpu_device.py   tests/test_proxy_gpu.py -k cycle
for d in "$O"/tr/*; do python3 -m gicbench analyze "$d" > "$d.analyze.txt" 2>&1; done; pack
cd "$ROOT" && for f in test_doca_submitter_gpu test_emu_cuda test_gpu_device test_proxy_gpu; do
  step "pytest_$f" 120 python3 -m pytest -p no:cacheprovider -q -rs -x -m gpu \
    -k "not end_to_end and not doca_cuda_engine" "tests/$f.py"  # see doca_pytest_cuda
done
# ---- proxyrev_ steps: every mini-proxy experiment with GPU producers through mpiexec -n 2,
# small, payloads validated by the harness against each experiment's expected_landing (the
# kernels' landing; tests/test_proxy_gpu_cpu.py checks the same with the kernels built for the
# CPU). Both handoffs; baseline also with more producers than rings (shared rings); single-op's
# round trip and completion-scope (--scope all) with GPU producers at both ends (px_probe, the
# px_latency quiet: new, never run on a GPU).
# Only these: ONLY='build|proxyrev_.*'. PROXYREV_PRODUCER=host runs the same commands with host
# producers (how they were checked without a GPU; there with PROXYREV_PROGRESS=inline, 2 cores).
PR="$G --submitter proxy --producer ${PROXYREV_PRODUCER:-gpu} --progress ${PROXYREV_PROGRESS:-thread} \
  --precondition-s 0"
for h in baseline tuned; do
  case $h in baseline) PRP="--producers 6" ;; *) PRP="" ;; esac
  step "proxyrev_single_op_$h" 40 $PR single-op --handoff $h -q 2 -e 64 -f 8 -n 200 -w 20 \
    -o "$O/tr/proxyrev_single_op_$h"
  step "proxyrev_completion_scope_$h" 40 $PR completion-scope --handoff $h -q 4 -n 200 -w 20 \
    -o "$O/tr/proxyrev_completion_scope_$h"
  step "proxyrev_proxy_rate_$h" 40 $PR proxy-rate --handoff $h $PRP --sweep-workers 1,2 \
    --sweep-rings 4 --sweep-batch 1,16 -e 64 -f 8 --messages 2000 -w 50 \
    -o "$O/tr/proxyrev_proxy_rate_$h"
  step "proxyrev_msg_rate_$h" 40 $PR msg-rate --handoff $h -q 2 -t 2 --workers 2 --rings 4 \
    --batch 4 -e 64 -f 8 --messages 2000 -w 50 -o "$O/tr/proxyrev_msg_rate_$h"
  step "proxyrev_payload_$h" 40 $PR payload --handoff $h -q 2 -t 2 --workers 2 --rings 4 \
    -e 64K -f 16 --point-bytes 1M --messages 2000 -w 20 -o "$O/tr/proxyrev_payload_$h"
done
step proxyrev_loaded_baseline 40 $PR loaded-rtt --handoff baseline --queue shared,reserved \
  --background 8 --workers 2 --rings 4 -e 64 -f 8 -n 200 -w 20 -o "$O/tr/proxyrev_loaded_baseline"
step proxyrev_loaded_tuned 40 $PR loaded-rtt --handoff tuned --queue reserved --background 3 \
  --workers 2 --rings 4 -e 64 -f 8 -n 200 -w 20 -o "$O/tr/proxyrev_loaded_tuned"
for d in "$O"/tr/proxyrev_*; do [ -d "$d" ] && python3 -m gicbench analyze "$d" > "$d.analyze.txt" 2>&1; done; pack
cd "$ROOT" && step proxyrev_pytest 90 python3 -m pytest -p no:cacheprovider -q -rs \
  tests/test_proxy_gpu.py tests/test_proxy_gpu_cpu.py tests/test_proxy_workers_refused.py
# loaded-rtt and payload through mini-proxy and mini-gda on the same experiment: 64
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
# ---- doca_ steps on the CUDA engine, last: a hung engine kernel killed by a step's timeout left
# the GPUs "busy or unavailable" for the next steps (2026-11-30, x2 machine under MPS). On two or
# more GPUs one rank per GPU needs no MPS: it is stopped first. In-process (two fabrics, one GPU):
# every GPU_SM_* handler on GPU-resident queues, the host-thread handlers on --queues host (and
# refused on --queues device), a round trip; then `mpiexec -n 2` one rank per GPU.
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then echo quit | nvidia-cuda-mps-control 2>/dev/null; fi
step doca_pytest_cuda 60 python3 -m pytest -p no:cacheprovider -q -rs -m gpu -o faulthandler_timeout=25 \
  tests/test_doca_submitter_gpu.py -k doca_cuda_engine
# Every handler on the CUDA engine: the GPU_SM_* ones with GPU-resident queues, the host-thread
# ones with host queues (their thread stores the record and rings).
for h in gpu-sm-db gpu-sm-no-dbr gpu-sm-bf cpu-proxy cpu-proxy-free-flow; do
  case $h in cpu-*) q=host ;; *) q=device ;; esac
  step "doca_cudaeng_$h" 30 $D $DRT --engine cuda --queues $q --submitter doca --doca-handler "$h" \
    --doca-sharing gpu -o "$O/tr/doca_cudaeng_$h"
done
python3 bench/doca_vs_gda.py --session "$O/runs" "$O/doca_session" > "$O/doca_session.txt" 2>&1; pack
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
# gpu_tests: every gpu-marked test that runs in one process, with the time left (a whole-suite
# check after a refactor: ONLY='build|compile|gpu_tests'); the per-test log is gpu_tests.json.
cd "$ROOT" && step gpu_tests 420 python3 -m pytest -p no:cacheprovider -q -rs -m "gpu and not mpi" \
  -o faulthandler_timeout=60 --ignore=tests/mpi tests
echo "== done at $SECONDS s" >> "$O/summary.txt"; pack
echo quit | nvidia-cuda-mps-control 2>/dev/null
cat "$O/summary.txt"; cat "$O/doca_vs_gda.txt" 2>/dev/null | head -40
cat "$O/gda_paths.txt" 2>/dev/null
