#!/bin/bash
# ONE call on a lent one-GPU H200, two ranks under MPS, every step under a deadline: build;
# compile (the CUDA engine and every mini-gda ordering's module, once); gda_tests (mini-gda's
# gpu-marked tests); table5 (bench/table5.py: the paper's Table 5 rows through mini-gda on the
# CPU engine and on the CUDA engine with GPU-resident queues); hostrung (bench/engine_threads.py:
# the host-rung doorbell against the GPU-rung one at 16 QPs, CPU engine).
#   OUT=/path bash bench/gpu_rates.sh     ($OUT: summary.txt, one log per step, table5.md/json)
#   ONLY='build|compile|table5' ...        (a regex of step names, bench/step.sh)
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-560}))
O=${OUT:-/tmp/gpu-rates}; mkdir -p "$O"
. "$(dirname "$0")/step.sh"
device_setup
step compile 120 python3 -c "
import concurrent.futures as cf
from gicbench.fabric.emu.cuda_engine import compile_engine
from gicbench.submit.gpu.build import module
from gicbench.submit.gpu.params import ORDERINGS
with cf.ThreadPoolExecutor(4) as ex:
    fs = [ex.submit(compile_engine, 'sm_90')] + [ex.submit(module, o) for o in ORDERINGS]
    print([str(f.result())[:60] for f in fs])"
PYT="python3 -m pytest -q -p no:cacheprovider -rs -o faulthandler_timeout=60"
step gda_tests 100 $PYT -m gpu tests/test_gpu_device.py tests/test_gpu_paths_device.py
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
TAILN=16 step table5 ${TABLE5_S:-330} python3 bench/table5.py --messages ${MESSAGES:-50000} \
  --sq-depth ${SQ:-1024} --md "$O/table5.md" --json "$O/table5.json"
TAILN=12 step hostrung 80 python3 bench/engine_threads.py --only host-rung --threads 1 \
  --messages 100000 --md "$O/hostrung.md"
echo quit | nvidia-cuda-mps-control 2>/dev/null
echo "== done $SECONDS s" | tee -a "$O/summary.txt"
