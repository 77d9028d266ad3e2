#!/bin/bash
# ONE call on a lent one-GPU H200, two ranks under MPS, every step under a deadline: mini-gda's
# msg-rate solo loop (GICBENCH_GDA_DEFINES=GDA_SOLO=1: a thread alone on its lane runs a loop
# compiled without the other units' branches) against the default general loop, side by side:
# build; gda_tests (mini-gda's rate tests on the solo build); ab (one thread, one QP, batch 1 and
# 16, gpu-fence and none, CUDA engine with GPU-resident queues, each row with GDA_SOLO=0 and 1);
# table5 (bench/table5.py on the CUDA engine with the solo build).
#   OUT=/path bash bench/msg_rate_solo.sh   ($OUT: summary.txt, ab.txt, one log per step)
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-560}))
O=${OUT:-/tmp/msg-rate-solo}; mkdir -p "$O"
. "$(dirname "$0")/step.sh"
device_setup
PYT="python3 -m pytest -q -p no:cacheprovider -rs -o faulthandler_timeout=60"
GICBENCH_GDA_DEFINES=GDA_SOLO=1 step gda_tests 120 $PYT -m gpu tests/test_gpu_device.py \
  tests/test_gpu_paths_device.py tests/test_gda_lock.py
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
ab() {
  local CU="--engine cuda --queues device --engine-ctas 32"
  for ord in gpu-fence none; do
    for b in 1 16; do
      for solo in 0 1; do
        printf '%s batch %s GDA_SOLO=%s: ' "$ord" "$b" "$solo"
        GICBENCH_GDA_DEFINES=GDA_SOLO=$solo timeout 60 mpiexec --bind-to none -n 2 python3 -m \
          gicbench run --submitter gpu -b 8 $CU --ordering $ord msg-rate -t 1 -q 1 --batch $b \
          --messages 100000 --json --quiet -o "/tmp/solo-ab-$ord-$b-$solo-$$" | python3 -c \
          "import json,sys; print([round(r['msg_rate_mps'], 2) for r in json.load(sys.stdin)['results']])"
      done
    done
  done
}
TAILN=10 step ab 150 ab
cp "$O/ab.log" "$O/ab.txt" 2>/dev/null
GICBENCH_GDA_DEFINES=GDA_SOLO=1 TAILN=16 step table5 200 python3 bench/table5.py --engines cuda \
  --messages 50000 --md "$O/table5.md" --json "$O/table5.json"
echo quit | nvidia-cuda-mps-control 2>/dev/null
echo "== done $SECONDS s" | tee -a "$O/summary.txt"
