#!/bin/bash
# mini-gda on a GPU machine: build, GPU tests, then every GPU experiment through
# `mpiexec -n 2 gicbench run ... --submitter gpu` on the emulated NIC's CPU engine (engine threads,
# host-mapped queues). Never changes the GPU's clocks: the clock sweep is not run here (see
# README); the effective SM clock is measured in every point instead. Results go to $OUT.
#   bash bench/gda_device.sh [tests|runs]   (tests only, runs only; default both)
set -u
O=${OUT:-/tmp/gda}; mkdir -p "$O"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv; nproc; } \
  > "$O/machine.txt" 2>&1
if [ ! -d /tmp/gs/gicbench ]; then
  python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs . > "$O/build.log" 2>&1 \
    || { tail -30 "$O/build.log"; exit 1; }
fi
export PYTHONPATH=/tmp/gs
G="mpiexec --bind-to none -n 2 python3 -m gicbench run --submitter gpu --progress thread --timeout 5"
step() {  # step NAME SECONDS CMD...: one command, its output kept, never more than SECONDS
  local name=$1 t=$2; shift 2
  echo "== $name: $*" | tee -a "$O/summary.txt"
  timeout -k 5 "$t" "$@" > "$O/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc" | tee -a "$O/summary.txt"; tail -25 "$O/$name.log"
}
if [ "${1:-}" != "runs" ]; then
  step tests 240 python3 -m pytest -q -p no:cacheprovider -rs -x --timeout 120 \
    tests/test_gpu_device.py tests/test_gpu_kernels_nvcc.py
fi
[ "${1:-}" = "tests" ] && exit 0
for o in gpu-fence none gpu-fence-dbrec gpu-release-store threadfence sys-release-store sys-fence; do
  step "t4_$o" 60 $G single-op --ordering "$o" --modes issue,put_completion -b 8 -n 2000 -w 200 \
    -o "$O/runs/t4_$o" --quiet
done
step rtt 60 $G single-op --modes round_trip -b 8 -n 200 -w 20 -o "$O/runs/rtt" --quiet
step ptr 60 $G single-op --payload pointer -b 64 -e 4K -f 8 --modes issue,put_completion -n 500 \
  -o "$O/runs/ptr" --quiet
step inl 60 $G single-op -b 8 -e 512 -f 4 --modes issue -n 500 -o "$O/runs/inl" --quiet
step scope 90 $G completion-scope -q 16 -n 500 -w 50 -o "$O/runs/scope" --quiet
step t5_1t1q 60 $G msg-rate -t 1 -q 1 --batch 1 --messages 200000 -o "$O/runs/t5_1t1q" --quiet
step t5_warp1q 60 $G msg-rate -t 32 -q 1 --batch 32 --publish warp --messages 50000 \
  -o "$O/runs/t5_warp1q" --quiet
step t5_2warp1q 60 $G msg-rate -t 64 -q 1 --batch 32 --publish warp --messages 30000 \
  -o "$O/runs/t5_2warp1q" --quiet
step t5_thr1q 60 $G msg-rate -t 32 -q 1 --batch 1 --publish thread --messages 20000 \
  -o "$O/runs/t5_thr1q" --quiet
step t5_lock1q 60 $G msg-rate -t 32 -q 1 --batch 1 --publish lock --messages 20000 \
  -o "$O/runs/t5_lock1q" --quiet
for q in 16 32 64; do
  step "t5_q$q" 90 $G msg-rate -t $((32 * q)) -q $q --batch 32 --publish warp --messages 20000 \
    -o "$O/runs/t5_q$q" --quiet
done
for d in "$O"/runs/*; do python3 -m gicbench analyze "$d" > "$d.analyze.txt" 2>&1; done
