#!/bin/bash
# Every gpu-marked test on a lent GPU machine, one process per test file (a hung kernel ends
# that file's run, not the others'), each test with a 90 s limit that dumps every thread's
# stack (pytest-timeout, thread method). Run after bench/device_session.sh's build step has
# installed gicbench in /tmp/gs, or on its own (it builds when /tmp/gs is missing):
#   DEADLINE_S=300 bash bench/gpu_tests.sh     -> $OUT/gpu_tests.txt (one line per test)
set -u
DEADLINE=$((SECONDS + ${DEADLINE_S:-300}))
OUTDIR=${OUT:-/tmp/gpu-tests-out}; mkdir -p "$OUTDIR"; L=/tmp/gpu-tests; mkdir -p "$L"
export PYTHONUNBUFFERED=1
[ -d /tmp/gs/gicbench ] || python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/gs .
export PYTHONPATH=/tmp/gs
VER=$(cd .cache/gpunetio 2>/dev/null && dirname */VERSION | head -1)
export GICBENCH_GPUNETIO_DIR="$PWD/.cache/gpunetio/$VER" GICBENCH_DOCA_CACHE=/tmp/doca-cubin
: > "$OUTDIR/gpu_tests.txt"
for f in $(grep -rl "mark.gpu" tests --include='test_*.py' | grep -v '^tests/mpi/' | sort); do
  left=$((DEADLINE - SECONDS)); [ "$left" -gt 150 ] && left=150
  name=$(basename "$f" .py)
  if [ "$left" -le 10 ]; then echo "$f: not run (deadline)" >> "$OUTDIR/gpu_tests.txt"; continue; fi
  timeout -k 5 "$left" python3 -m pytest -p no:cacheprovider -q -rA -m "gpu and not mpi" \
    --timeout 90 --timeout-method thread "$f" > "$L/$name.log" 2>&1
  echo "$f: rc=$?" >> "$OUTDIR/gpu_tests.txt"
  grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$L/$name.log" | cut -c1-220 >> "$OUTDIR/gpu_tests.txt"
  grep -E "^(E  |Timeout)" "$L/$name.log" | head -5 | cut -c1-300 >> "$OUTDIR/gpu_tests.txt"
done
tar czf "$OUTDIR/gpu_tests.tgz" -C "$L" .
grep -c "^PASSED" "$OUTDIR/gpu_tests.txt" | sed 's/^/passed: /'
grep -E "rc=|^FAILED|^ERROR" "$OUTDIR/gpu_tests.txt"
