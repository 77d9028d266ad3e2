#!/bin/sh
# Runs inside the guest as root: Soft-RoCE on a veth, the device checks, then the VM test group
# (pytest in-process, then under mpiexec -n 2 and -n 4). Writes its exit status to $1/rc and the
# time of each phase to $1/phases. $2 is the mode: tests (the VM test group), inproc (without
# mpiexec), mpi (only under mpiexec) or bench (only bench/perftest_compare.py). Later arguments
# go to pytest.
OUT=$1
MODE=${2:-tests}
shift 2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$ROOT/.venv/bin"
T0=$(date +%s)
phase() { echo "$1: $(( $(date +%s) - T0 )) s after boot" >> "$OUT/phases"; }
finish() { echo "$1" > "$OUT/rc"; sync; exit "$1"; }
step() { echo "+ $*"; "$@" || { echo "gicbench guest: FAILED: $*" >&2; finish "${RC:-80}"; }; }

phase "guest up"
RC=81 step modprobe rdma_rxe
ip link set lo up
RC=82 step ip link add veth0 type veth peer name veth1
ip link set veth0 up
ip link set veth1 up
RC=83 step ip addr add 10.200.0.1/24 dev veth0
RC=84 step rdma link add rxe0 type rxe netdev veth0
RC=85 step sh -c 'ibv_devices | grep -w rxe0'
RC=86 step sh -c 'ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE'
ibv_devinfo -d rxe0 -v | grep -E 'hca_id|link_layer|state|active_mtu|GID\['
phase "Soft-RoCE up"

export GICBENCH_VM=1 HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TMPDIR=/tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
# MPI over shared memory only: left to itself, Open MPI's OFI transport picks up rxe0 too (and
# aborted or hung beside the tests' own QPs).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mtl=^ofi
MPIEXEC="$BIN/mpiexec"
[ -x "$MPIEXEC" ] || MPIEXEC=mpiexec
cd "$ROOT" || finish 87
# No plugin autoload: hypothesis and friends cost ~a minute of imports under software emulation.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
# A test stuck inside MPI or verbs is ended by a watchdog thread that dumps every stack.
PYTEST="$BIN/python -m pytest -v -p no:cacheprovider --color=no -p pytest_timeout -p pytest_mpi"
TEST_LIMIT=$(cat "$OUT/test_timeout" 2>/dev/null || echo 600)  # run_vm.sh's GICBENCH_VM_TEST_TIMEOUT
PYTEST="$PYTEST --timeout=$TEST_LIMIT --timeout-method=thread"
# Test files named on the command line replace the default target (all of tests/vm).
TARGET=tests/vm
case " $* " in *" tests/"*) TARGET= ;; esac
rc=0
if [ "$MODE" = bench ]; then
    "$BIN/python" bench/perftest_compare.py --out "$OUT" "$@" || rc=79
    phase "perftest comparison (rc $rc)"
    finish "$rc"
fi
if [ "$MODE" != mpi ]; then
    $PYTEST -m "not mpi" $TARGET "$@" || rc=$?
    phase "in-process tests (rc $rc)"
fi
[ "$MODE" = inproc ] && finish "$rc"
for n in 2 4; do
    $MPIEXEC -n "$n" $PYTEST --with-mpi -m mpi $TARGET "$@" || rc=$(( rc ? rc : 70 + n ))
    phase "mpiexec -n $n tests (rc $rc)"
done
finish "$rc"
