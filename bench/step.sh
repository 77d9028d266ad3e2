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
