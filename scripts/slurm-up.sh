#!/usr/bin/env bash
# Starts a one-node Slurm cluster on 127.0.0.1, for trying `tolaria sweep
# --launcher slurm` (and `tolaria eval --launcher slurm`) on one machine, and
# for tolaria's end-to-end tests. Needs root and Debian's slurm-wlm and munge
# (scripts/install-deps.sh test installs them).
#
#   scripts/slurm-up.sh [DIR]   state, logs and slurm.conf under DIR (default: a new
#                               temporary directory); prints `export SLURM_CONF=...`
#   scripts/slurm-down.sh DIR   stops it and removes DIR
#
# The node has this machine's CPUs and memory and two fake GPUs (GRES gpu:2,
# backed by /dev/tty0 and /dev/tty1), so --gres=gpu:1 tasks get
# CUDA_VISIBLE_DEVICES. slurmctld and slurmd listen on ports 6817 and 6818:
# one such cluster per machine at a time.
set -euo pipefail

fail() {
	echo "slurm-up: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || fail "must run as root (slurmd runs jobs as their users)"
for b in slurmctld slurmd sinfo munged munge; do
	command -v "$b" >/dev/null 2>&1 || fail "$b is not installed: run scripts/install-deps.sh test (Debian packages slurm-wlm and munge)"
done

dir=${1:-$(mktemp -d /tmp/tolaria-slurm.XXXXXX)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -e "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
	echo "export SLURM_CONF=$dir/slurm.conf"
	echo "slurm-up: already running in $dir" >&2
	exit 0
fi
for port in 6817 6818; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		fail "port $port is in use: another Slurm runs here (scripts/slurm-down.sh DIR stops one started by this script)"
	fi
done

host=$(hostname -s)
cpus=$(nproc)
mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10))
mkdir -p "$dir/state" "$dir/log" "$dir/spool/slurmd-$host"

cat >"$dir/slurm.conf" <<EOF
# A one-node cluster for tolaria (scripts/slurm-up.sh)
ClusterName=tolaria
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MailProg=/bin/true
GresTypes=gpu
ReturnToService=2
MinJobAge=300
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$dir/gres.conf" <<EOF
NodeName=$host Name=gpu File=/dev/tty[0-1]
EOF

# munged, once per machine.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
	[ -s /etc/munge/munge.key ] || fail "/etc/munge/munge.key is missing: reinstall munge (apt-get install --reinstall munge)"
	mkdir -p /run/munge
	chown munge:munge /run/munge
	runuser -u munge -- /usr/sbin/munged
	for _ in $(seq 50); do
		munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
		sleep 0.1
	done
	munge -n | unmunge >/dev/null || fail "munged did not start; see /var/log/munge/munged.log"
fi

export SLURM_CONF=$dir/slurm.conf
setsid slurmctld -D -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 </dev/null &
setsid slurmd -D -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 </dev/null &

state=
for _ in $(seq 150); do
	state=$(sinfo -h -N -o %T 2>/dev/null || true)
	[ "$state" = idle ] && break
	sleep 0.2
done
if [ "$state" != idle ]; then
	echo "slurm-up: the node did not become idle within 30 s (state: ${state:-none}); logs:" >&2
	tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 || true
	exit 1
fi
echo "export SLURM_CONF=$dir/slurm.conf"
echo "slurm-up: one-node cluster up in $dir (stop it with scripts/slurm-down.sh $dir)" >&2
