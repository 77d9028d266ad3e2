#!/usr/bin/env bash
# A one-node Slurm cluster on this machine for the tests: install | start | stop | status.
# Everything lives under $GICBENCH_SLURM_STATE (default /tmp/gicbench-slurm); clients and daemons
# find the configuration through SLURM_CONF, so the system's /etc/slurm is never touched.
# The node claims 4 CPUs whatever the machine has (config_overrides) and the partition
# oversubscribes, so 4-task jobs fit on a 2-core machine. Needs root (apt-get, munge, slurmd).
set -euo pipefail
STATE=${GICBENCH_SLURM_STATE:-/tmp/gicbench-slurm}
CONF=$STATE/slurm.conf
HOST=$(hostname -s)
PLUGINS=/usr/lib/x86_64-linux-gnu/slurm-wlm

# Debian's mpi_pmix plugin dlopen()s the unversioned pmix2/lib/libpmix.so, which only
# libpmix-dev ships: with libpmix2 alone `srun --mpi=pmix` fails to load the plugin, slurmstepd
# dies ("Failed to read MPI conf from slurmd"), srun's launch times out and the node is left
# 'completing'. So libpmix-dev is installed, and before slurmd starts.
PMIX_LIB=/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so

install() {
  if command -v sbatch >/dev/null && command -v munged >/dev/null && command -v slurmd >/dev/null \
    && [ -e "$PMIX_LIB" ]; then
    return 0
  fi
  echo "installing slurm-wlm, munge and libpmix-dev with apt-get"
  apt-get update -qq -o DPkg::Lock::Timeout=300
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 slurm-wlm munge libpmix-dev >/dev/null
}

write_conf() {
  mkdir -p "$STATE/ctld" "$STATE/d" "$STATE/log"
  cat >"$CONF" <<CONF
# Written by tests/slurm/cluster.sh: a one-node test cluster.
ClusterName=gicbench-test
SlurmctldHost=$HOST
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${GICBENCH_SLURMCTLD_PORT:-6817}
SlurmdPort=${GICBENCH_SLURMD_PORT:-6818}
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
# Short so the tests' time-limited jobs end promptly: SIGTERM, then SIGKILL 10 s later.
KillWait=10
OverTimeLimit=0
MinJobAge=600
InactiveLimit=0
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=$HOST CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4096 State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

start_munge() {
  # A working munged (it can encode a credential) is the machine's own: used, left running.
  if munge -n >/dev/null 2>&1; then return 0; fi
  [ -s /etc/munge/munge.key ] || { mungekey -c 2>/dev/null || create-munge-key -f; }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  mkdir -p "$STATE/munge" && chown munge:munge "$STATE/munge"
  runuser -u munge -- /usr/sbin/munged --pid-file="$STATE/munge/munged.pid"
}

start() {
  install
  stop  # a clean start even if an earlier session left daemons behind
  write_conf
  start_munge
  export SLURM_CONF=$CONF
  # -c: a clean state (no jobs from an earlier session); -i would ignore errors.
  /usr/sbin/slurmctld -c
  /usr/sbin/slurmd -c
  for _ in $(seq 1 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "slurm: node $HOST up ($CONF)"
      return 0
    fi
    sleep 0.5
  done
  echo "slurm: node did not come up; logs:" >&2
  tail -n 20 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2 || true
  sinfo >&2 || true
  return 1
}

stop_pidfile() {
  local f=$1
  if [ -s "$f" ]; then
    local pid
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$f"
  fi
}

stop() {
  # Jobs first (a test that failed may leave some running): cancelled while slurmd can still
  # end their steps, so no slurmstepd or task outlives the cluster.
  if [ -s "$STATE/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurmctld.pid")" 2>/dev/null; then
    export SLURM_CONF=$CONF
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      scancel $jobs || true
      for _ in $(seq 1 60); do
        [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi
  # The daemons this script started, by the pid files it gave them (a munged that was already
  # running before start is not ours and stays).
  stop_pidfile "$STATE/slurmd.pid"
  stop_pidfile "$STATE/slurmctld.pid"
  stop_pidfile "$STATE/munge/munged.pid"
}

case ${1:-} in
  install) install ;;
  start) start ;;
  stop) stop ;;
  conf) echo "$CONF" ;;
  *) echo "usage: $0 install|start|stop|conf" >&2; exit 2 ;;
esac
