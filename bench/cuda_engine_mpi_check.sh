#!/bin/bash
# After bench/cuda_engine_next.sh, in the same device call (its /tmp/gs install): the CUDA engine
# across processes on ONE GPU under MPS (two ranks; CUDA IPC of the engine's GPU arena, and a
# 64-QP-per-peer bring-up through the harness's setup batch), then mini-proxy's in-process
# two-rank loaded run with GPU producers as an MPS client. Logs in $OUT.
set -u
O=${OUT:-/tmp/cuda-engine-mpi}; mkdir -p "$O"
export PYTHONPATH=/tmp/gs PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 \
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
run() {  # run NAME SECONDS CMD...
  local name=$1 t=$2; shift 2; local t0=$SECONDS
  timeout -k 5 "$t" "$@" > "$O/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0)) s" | tee -a "$O/mpi_summary.txt"
  tail -"${TAILN:-8}" "$O/$name.log" | tee -a "$O/mpi_summary.txt"
}
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
MPI="env CUDA_VISIBLE_DEVICES=0 mpiexec --bind-to none -n 2"
GICBENCH_CUDA_ENGINE_ARENA_MB=256 run ipc_arena 60 $MPI python3 -m pytest -p no:cacheprovider -q \
  -rs tests/mpi/test_emu_cuda_ipc_mpi.py
rm -rf /tmp/o; TAILN=16 run mpi_cuda64 60 bash -c "$MPI python3 -m gicbench run --timeout 5 --json \
  --quiet single-op --modes issue,put_completion -q 64 -n 500 -w 50 --engine cuda --queues device \
  --submitter gpu -o /tmp/o/cuda64 && python3 -m gicbench analyze /tmp/o/cuda64"
# mini-proxy's in-process two-rank loaded test as an MPS client (it faulted so on 2026-11-30, once,
# after MPI runs; it passed without MPS and under memcheck with 0 errors).
run proxy_loaded_mps 40 python3 -m pytest -p no:cacheprovider -q tests/test_proxy_gpu.py \
  -k loaded_reserved_two_ranks
echo quit | nvidia-cuda-mps-control; sleep 1
