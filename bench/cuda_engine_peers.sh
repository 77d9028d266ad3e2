#!/bin/bash
# ONE call on a lent one-GPU H200, two ranks under MPS, every step under a deadline:
#   build; compile (the CUDA engine as built, and with GICBENCH_ENGINE_PEER_TABLES=0, and every
#     mini-gda ordering's module, once, before two ranks would each compile them);
#   ipc (tests/mpi/test_emu_cuda_ipc_mpi.py: the engine across processes, each rank's responder
#     checks against the other's published tables);
#   mps_tables / mps_segment (mini-gda put+completion through gicbench's CLI on the CUDA engine
#     with GPU-resident queues, pairs: a responder in another process checked against its
#     engine's published tables, then, same arguments, against its segment in host memory);
#   probe (bench/gda_probe.py --queues device: mini-gda's issue per ordering, 8 B inline and
#     pointer, beside the bare publication probe, in the same call);
#   conformance (the conformance suite and the GPU engine tests against the CUDA engine);
#   gda_tests (mini-gda's gpu-marked tests); memcheck (compute-sanitizer on the engine alone).
#   ONLY='build|compile|ipc' ... runs only the steps named (a regex, bench/step.sh)
#   OUT=/path bash bench/cuda_engine_peers.sh     ($OUT: summary.txt, one log per step, JSON)
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-560}))
O=${OUT:-/tmp/cuda-engine-peers}; mkdir -p "$O"
. "$(dirname "$0")/step.sh"
device_setup
step compile 120 python3 -c "
import concurrent.futures as cf, os, subprocess, sys
from gicbench.submit.gpu.build import module
from gicbench.submit.gpu.params import ORDERINGS
warm = 'from gicbench.fabric.emu.cuda_engine import compile_engine; print(compile_engine(\"sm_90\"))'
envs = [dict(os.environ), dict(os.environ, GICBENCH_CUDA_ENGINE_DEFINES='PEER_TABLES=0')]
with cf.ThreadPoolExecutor(4) as ex:
    fs = [ex.submit(subprocess.run, [sys.executable, '-c', warm], env=e, check=True) for e in envs]
    fs += [ex.submit(module, o) for o in ORDERINGS]
    print([str(f.result())[:60] for f in fs])"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
export MPI="mpiexec --bind-to none -n 2" O
TAILN=8 step ipc 60 $MPI python3 -m pytest -p no:cacheprovider -q -rs \
  tests/mpi/test_emu_cuda_ipc_mpi.py
run_mps() {  # run_mps NAME: mini-gda put+completion on the CUDA engine, 2 ranks, pairs
  rm -rf "$O/$1"
  $MPI python3 -m gicbench run --timeout 5 --json --quiet --sq-depth 256 -b 8 single-op \
    --modes issue,put_completion -n 2000 -w 200 --submitter gpu --engine cuda --queues device \
    -o "$O/$1" > "$O/$1.json" && python3 -m gicbench analyze "$O/$1"
}
export -f run_mps
TAILN=20 step mps_tables 90 bash -c "run_mps mps_tables"
GICBENCH_CUDA_ENGINE_DEFINES=PEER_TABLES=0 TAILN=20 step mps_segment 90 \
  bash -c "run_mps mps_segment"
TAILN=30 step probe 150 python3 bench/gda_probe.py --queues device -n 2000 \
  --json "$O/gda_probe_device.json" --md "$O/gda_probe_device.md"
echo quit | nvidia-cuda-mps-control 2>/dev/null
PYT="python3 -m pytest -q -p no:cacheprovider -rs -o faulthandler_timeout=60"
step conformance 120 $PYT tests/conformance/test_conformance.py tests/test_emu_cuda.py \
  tests/conformance/test_emu_core_cuda.py -k "cuda or batch"
step gda_tests 100 $PYT -m gpu tests/test_gpu_device.py tests/test_gpu_paths_device.py
GICBENCH_CUDA_ENGINE_ARENA_MB=64 GICBENCH_CUDA_ENGINE_TIMEOUT_S=60 TAILN=8 step memcheck 100 \
  compute-sanitizer --tool memcheck --target-processes all --print-limit 20 \
  python3 bench/cuda_engine_memcheck.py --ops 60
echo "== done $SECONDS s" | tee -a "$O/summary.txt"
