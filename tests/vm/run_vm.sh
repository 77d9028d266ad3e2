#!/usr/bin/env bash
# The VM test group's host side: boot a QEMU guest (virtme-ng, Debian's kernel, software
# emulation unless GICBENCH_VM_KVM=1), run tests/vm/guest.sh in it, return the guest's exit code.
# The guest sees this tree read-only through 9p, so the worktree's .venv runs inside unchanged.
# A guest that cannot boot or dies before writing its exit code fails the group loudly (exit 90):
# this group is never skipped silently. Prints its own wall time. Arguments go to the guest's pytest
# (GICBENCH_VM_MODE: tests = all, inproc = without mpiexec, mpi = only under mpiexec, bench =
# bench/perftest_compare.py instead of the tests).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV="$ROOT/.venv"
export PATH="$VENV/bin:$PATH"   # vng calls virtme-run by name
KERNEL=${GICBENCH_VM_KERNEL:-$(ls /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -n 1)}
MEMORY=${GICBENCH_VM_MEMORY:-2G}
CPUS=${GICBENCH_VM_CPUS:-2}
LIMIT=${GICBENCH_VM_TIMEOUT:-2400}
# Each guest test's own bound: the guest runs under software emulation, several times slower on a
# loaded host (a 60 s test took 320 s at load 6 on 2 cores); the guest has none of our variables,
# so it travels in the shared results directory.
TEST_LIMIT=${GICBENCH_VM_TEST_TIMEOUT:-600}
KVM_FLAG=--disable-kvm          # KVM did not boot on these machines; TCG always does
[ "${GICBENCH_VM_KVM:-0}" = 1 ] && KVM_FLAG=

fail() { echo "gicbench test-vm: FAILED: $*" >&2; exit 90; }
command -v vng >/dev/null || fail "vng (virtme-ng) not found; run \`make test-vm\`, which installs it"
[ -n "$KERNEL" ] && [ -r "$KERNEL" ] || fail "no Debian kernel in /boot (apt-get install linux-image-amd64)"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86_64 missing (apt-get install qemu-system-x86)"

OUT=$(mktemp -d /tmp/gicbench-vm.XXXXXX)
echo "$TEST_LIMIT" > "$OUT/test_timeout"
start=$(date +%s)
echo "gicbench test-vm: booting $KERNEL (${KVM_FLAG:-kvm}, $CPUS CPUs, $MEMORY) results in $OUT"
# Through a pipe: QEMU reopens our stdout for the guest's and would overwrite a redirected file.
timeout "$LIMIT" vng --run "$KERNEL" $KVM_FLAG --memory "$MEMORY" --cpus "$CPUS" \
    --rwdir "$OUT" --exec "$ROOT/tests/vm/guest.sh $OUT ${GICBENCH_VM_MODE:-tests} $*" \
    </dev/null 2>&1 | cat
vng_rc=${PIPESTATUS[0]}
wall=$(( $(date +%s) - start ))
if [ ! -s "$OUT/rc" ]; then
    [ "$vng_rc" = 124 ] && fail "the guest ran past ${LIMIT} s (after ${wall} s)"
    fail "the guest did not boot or its script did not finish (vng exit $vng_rc, ${wall} s)"
fi
rc=$(cat "$OUT/rc")
[ -f "$OUT/perftest_compare.json" ] && cp "$OUT/perftest_compare.json" "${GICBENCH_VM_RESULTS:-.}/"
[ -f "$OUT/phases" ] && sed 's/^/gicbench test-vm: /' "$OUT/phases"
echo "gicbench test-vm: guest exit status $rc; wall time ${wall} s (boot, Soft-RoCE set-up, tests, power-off)"
exit "$rc"
