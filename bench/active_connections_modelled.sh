#!/bin/bash
# The first paper's Fig. 10 with emu's calibrated NIC model in ONE call on a lent one-GPU H200:
# jobs/sweeps/active-connections-modelled.toml (mini-gda, a host thread ringing, 8 ranks under
# MPS, send-only / receive-only / send-receive to 16,384 active QPs per NIC), then `analyze`
# (the plateau + power-law fit per curve) and `report` (Fig. 10-style plots) of each point.
# Every figure it gives is modelled. Never changes the GPU's clocks.
#   OUT=/path bash bench/active_connections_modelled.sh    ($OUT: summary.txt, ac.tgz)
#   SWEEP=other.toml ONLY='build|sweep' bash bench/active_connections_modelled.sh
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-570}))
OUTDIR=${OUT:-/tmp/ac-modelled-out}; O=/tmp/ac-modelled; rm -rf "$O"; mkdir -p "$O" "$OUTDIR"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
  OMPI_MCA_hwloc_base_binding_policy=none CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
. "$(dirname "$0")/step.sh"
pack() {  # everything but the rank files, then the rank files while they fit a returned file
  tar czf "$OUTDIR/ac.tgz" -C "$O" --exclude='*.h5' . 2>/dev/null
  cp "$O/summary.txt" "$OUTDIR/" 2>/dev/null
  tar czf "$OUTDIR/traces.tgz" -C "$O" sweep 2>/dev/null
  [ "$(stat -c %s "$OUTDIR/traces.tgz" 2>/dev/null || echo 0)" -lt 15000000 ] \
    || rm -f "$OUTDIR/traces.tgz"
}
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nproc; free -g
  git log --oneline -1 2>/dev/null; } > "$O/machine.txt" 2>&1
rm -rf /tmp/gs  # pip --target leaves an earlier install in place
step build 180 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
export PYTHONPATH=/tmp/gs
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
# Compile mini-gda's module once before eight ranks ask for it.
step compile 120 python3 -c "from gicbench.submit.gpu.build import module; module('gpu-fence')"
TAILN=12 step sweep $((DEADLINE - SECONDS - 60)) python3 -m gicbench jobs sweep \
  "${SWEEP:-jobs/sweeps/active-connections-modelled.toml}" -d "$O/sweep"
pack
for d in "$O"/sweep/points/*/; do
  n=$(basename "$d")
  python3 -m gicbench analyze "$d" --json > "$O/$n.analyze.json" 2>&1
  COLUMNS=250 python3 -m gicbench analyze "$d" > "$O/$n.analyze.txt" 2>&1
  python3 -m gicbench report "$d" -o "$O/$n.report.md" --allow-incomplete > /dev/null 2>&1
done
pack
echo quit | nvidia-cuda-mps-control 2>/dev/null
pack
