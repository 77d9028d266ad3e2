# step NAME SECONDS CMD...: one deadline-bounded step of a device script (sourced). Runs CMD for at
# most SECONDS (less when $DEADLINE, in bash SECONDS, is nearer), its output in $O/NAME.log, a
# line and the last ${TAILN:-6} lines of that log appended to $O/summary.txt; skipped unless NAME
# matches the regex $ONLY (default: every step).
step() {  # step NAME SECONDS CMD...: at most SECONDS (less if the deadline is nearer)
  local name=$1 t=$2; shift 2
  [[ "$name" =~ ^(${ONLY:-.*})$ ]] || return 0
  local left=$((DEADLINE - SECONDS)); [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -le 5 ]; then echo "== $name: skipped (deadline)" | tee -a "$O/summary.txt"; return; fi
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" > "$O/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0)) s (limit $t)" | tee -a "$O/summary.txt"
  tail -"${TAILN:-6}" "$O/$name.log" | tee -a "$O/summary.txt"
}
# device_setup: what a one-call device script does first (after setting $O and sourcing this):
# the one-node MPI settings, $O/machine.txt (the GPU and its clocks, cores, the checkout's
# commit), then step `build` (gicbench into /tmp/gs, which pip --target would not replace) and
# PYTHONPATH pointing there.
device_setup() {
  export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_btl=self,vader
  { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; nproc
    git log --oneline -1; } > "$O/machine.txt" 2>&1
  rm -rf /tmp/gs
  step build 150 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
  export PYTHONPATH=/tmp/gs
}
