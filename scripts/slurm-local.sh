#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, in a directory of its own, for the tests that run
# replicad under `srun --mpi=pmix` (Debian's slurm-wlm and munge; scripts/install-deps.sh).
# Needs root (slurmd starts the job's processes); nothing outside DIR is configured.
#   bash scripts/slurm-local.sh start DIR   starts munged, slurmctld and slurmd; prints the
#                                           SLURM_CONF to export; waits until the node is idle
#   bash scripts/slurm-local.sh stop DIR    stops them (DIR stays)
set -euo pipefail
cmd="${1:?usage: slurm-local.sh start|stop DIR}"
dir="$(realpath -m "${2:?usage: slurm-local.sh start|stop DIR}")"

stop() {
  for daemon in slurmd slurmctld munged; do
    if [ -f "$dir/$daemon.pid" ]; then
      kill "$(cat "$dir/$daemon.pid")" 2>/dev/null || true
      rm -f "$dir/$daemon.pid"
    fi
  done
}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

case "$cmd" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "usage: slurm-local.sh start|stop DIR" >&2; exit 2 ;;
esac

mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 700 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/munge.key"
# --force: munged refuses to run as root otherwise.
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"

node="$(hostname -s)"
cat >"$dir/slurm.conf" <<CONF
ClusterName=replicad-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
slurmd
for _ in $(seq 1 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; then
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 1
done
echo "slurm-local: the node did not become idle; logs in $dir" >&2
sinfo >&2 || true
tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
stop
exit 1
