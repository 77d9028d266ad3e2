#!/bin/bash
# --submitter nvshmem in ONE call on a lent H200 (one GPU), every step under a deadline:
#   build (pip install of the tree; NVSHMEM's cubins come prebuilt in $GICBENCH_NVSHMEM_CACHE:
#     build them where nvcc and rdma-core's mlx5dv.h are, and carry the directory);
#   nv_inproc (tests/test_nvshmem_gpu.py: NVSHMEM's kernels in one process);
#   nv_e2e (tests/test_nvshmem_submitter_gpu.py: `gicbench run --submitter nvshmem` end to end,
#     two and three ranks under MPS, CPU and CUDA engines);
#   sbs (bench/nvshmem_side_by_side.py: Table 3's rows and Fig. 4's curve, mini-gda, DOCA and
#     NVSHMEM internal/public through their submitters, round trips included);
#   rate_* (msg-rate in NVSHMEM's best shape, 16 QPs x 256 threads per CTA, both APIs, beside
#     mini-gda's 16 QPs x 16 threads batch 16, all on the CPU engine, two ranks under MPS).
#   OUT=/path bash bench/nvshmem_session.sh     ($OUT: summary.txt, one log per step, JSON)
#   ONLY='build|sbs' bash bench/nvshmem_session.sh      (a regex of step names)
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-560}))
O=${OUT:-/tmp/nvshmem-session}; mkdir -p "$O"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1
export GICBENCH_NVSHMEM_CACHE=${GICBENCH_NVSHMEM_CACHE:-$PWD/.cache/nvshmem-cubins}
. "$(dirname "$0")/step.sh"
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nproc; git log --oneline -1
  ls "$GICBENCH_NVSHMEM_CACHE"; } > "$O/machine.txt" 2>&1
rm -rf /tmp/gs  # pip --target leaves an earlier install in place
step build 150 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
export PYTHONPATH=/tmp/gs
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
PYT="python3 -m pytest -p no:cacheprovider -q -rs -o faulthandler_timeout=120"
TAILN=12 step nv_inproc 90 $PYT -m gpu tests/test_nvshmem_gpu.py
TAILN=20 step nv_e2e 240 $PYT -m gpu -x tests/test_nvshmem_submitter_gpu.py ${E2E_K:+-k "$E2E_K"}
TAILN=40 step sbs 150 python3 bench/nvshmem_side_by_side.py --qps ${SBS_QPS:-1,2,4,8,16} \
  --iters ${SBS_ITERS:-1000} --warm 100 --json "$O/sbs.json"
R="mpiexec --bind-to none -n 2 python3 -m gicbench run --timeout 10 --json --quiet --progress thread"
for path in internal public; do
  TAILN=4 step "rate_nv_$path" 60 $R msg-rate -q 16 -t 4096 --payload pointer -b 8 \
    --messages 20000 -w 200 --submitter nvshmem --nvshmem-path $path -o "$O/rate_nv_$path"
done
TAILN=4 step rate_gda 60 $R msg-rate -q 16 -t 16 --batch 16 -b 8 --messages 100000 \
  --submitter gpu -o "$O/rate_gda"
echo quit | nvidia-cuda-mps-control 2>/dev/null
echo "== done $SECONDS s" | tee -a "$O/summary.txt"
