#!/bin/bash
# The CUDA engine's doorbell-to-CQE latency in ONE call on a lent H200 (one GPU), every step under
# a deadline:
#   build;
#   stamps (bench/cuda_engine.py --stamps: the one-QP latency stage by stage on the stamped
#     engine, beside the floor of the same hand-off, bench_echo);
#   ab (the engine variants of AB side by side: latency at 1 QP and 16,384 configured for each,
#     throughput at 16/32 CTAs x 64 and 1,024 QPs; host-resident queues and the CPU engine once);
#   conformance (the conformance suite and the GPU engine tests against the default engine);
#   mps (two ranks under MPS through gicbench's CLI: mini-gda put+completion on the CUDA engine
#     with GPU-resident queues, the engine beside a running submitter);
#   rate_t*_q* (mini-gda's msg-rate on the CUDA engine, two Table 5 rows, 32 engine CTAs);
#   hostrung (bench/engine_threads.py: the host-rung doorbell against the GPU-rung one at 16 QPs);
#   gda_tests (mini-gda's gpu-marked tests); memcheck (compute-sanitizer on the engine alone, the
#   host its submitter).
#   OUT=/path bash bench/cuda_engine_latency.sh       ($OUT: summary.txt, one log per step, JSON)
#   ONLY='build|stamps' bash bench/cuda_engine_latency.sh      (a regex of step names)
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-540}))
O=${OUT:-/tmp/cuda-engine-latency}; mkdir -p "$O"
G=16+32:64+1024  # CTAs x QPs of each variant's throughput rows
# The engine before the four serve changes beside the default, which has all four (the per-QP
# serve cache, the parallel responder loads, one record acquire a serve, the early CQ lock CAS).
BEFORE=SERVE_CACHE=0@RESP_PAR=0@REC_ONCE=0@LOCK_EARLY=0
AB=${AB:-"r8@$BEFORE:$G r8:$G"}
. "$(dirname "$0")/step.sh"
device_setup
B="python3 bench/cuda_engine.py"
TAILN=14 step stamps 90 $B --stamps --skip bare,rate,latency --pings 2000 --json "$O/stamps.json"
TAILN=24 step ab 260 $B --skip bare --pings 2000 --latency-variants all --json "$O/ab.json" \
  --variants $AB
PYT="python3 -m pytest -q -p no:cacheprovider -rs -o faulthandler_timeout=60"
step conformance 120 $PYT tests/conformance/test_conformance.py tests/test_emu_cuda.py \
  tests/conformance/test_emu_core_cuda.py -k "cuda or batch"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
TAILN=20 step mps 60 bash -c "mpiexec --bind-to none -n 2 python3 -m gicbench run --timeout 5 \
  --json --quiet --sq-depth 256 -b 8 single-op --modes issue,put_completion -n 2000 -w 200 \
  --submitter gpu --engine cuda --queues device -o $O/mps_gda > $O/mps_gda.json \
  && python3 -m gicbench analyze $O/mps_gda"
# mini-gda on the CUDA engine (GPU-resident queues, 32 engine CTAs): two Table 5 rows
for row in "1 1" "16 16"; do set -- $row
  TAILN=3 step "rate_t$1_q$2" 45 mpiexec --bind-to none -n 2 python3 -m gicbench run --timeout 5 \
    --json --quiet --sq-depth 256 -b 8 msg-rate -t $1 -q $2 --batch 16 --messages 100000 \
    --submitter gpu --engine cuda --queues device --engine-ctas 32 -o $O/rate_t$1_q$2
done
# the host-rung doorbell against the GPU-rung one, 16 QPs x 16 threads, batch 16 (CPU engine)
TAILN=12 step hostrung 90 python3 bench/engine_threads.py --only host-rung --threads 1 \
  --messages 100000 --md "$O/hostrung.md"
echo quit | nvidia-cuda-mps-control 2>/dev/null
step gda_tests 90 $PYT -m gpu tests/test_gpu_device.py tests/test_gpu_paths_device.py
GICBENCH_CUDA_ENGINE_ARENA_MB=64 GICBENCH_CUDA_ENGINE_TIMEOUT_S=60 TAILN=8 step memcheck 100 \
  compute-sanitizer --tool memcheck --target-processes all --print-limit 20 \
  python3 bench/cuda_engine_memcheck.py --ops 60
echo "== done $SECONDS s" | tee -a "$O/summary.txt"
