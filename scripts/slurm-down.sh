#!/usr/bin/env bash
# Stops the one-node Slurm cluster that scripts/slurm-up.sh started in DIR and
# removes DIR. munged stays up (other clusters on this machine may use it):
# pass --munge to stop it too.
#
#   scripts/slurm-down.sh DIR [--munge]
set -euo pipefail

dir=${1:-}
[ -n "$dir" ] || {
	echo "usage: scripts/slurm-down.sh DIR [--munge]   (DIR is what scripts/slurm-up.sh used)" >&2
	exit 2
}
[ -f "$dir/slurm.conf" ] || {
	echo "slurm-down: $dir has no slurm.conf: not a cluster started by scripts/slurm-up.sh" >&2
	exit 1
}

pids=()
for f in "$dir"/slurmctld.pid "$dir"/slurmd-*.pid; do
	[ -f "$f" ] || continue
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		pids+=("$pid")
	fi
done
for _ in $(seq 100); do
	alive=
	for pid in "${pids[@]}"; do
		kill -0 "$pid" 2>/dev/null && alive=1
	done
	[ -z "$alive" ] && break
	sleep 0.1
done
for pid in "${pids[@]}"; do
	kill -KILL "$pid" 2>/dev/null || true
done
if [ "${2:-}" = --munge ] && [ -f /run/munge/munged.pid ]; then
	kill -TERM "$(cat /run/munge/munged.pid)" 2>/dev/null || true
fi
rm -rf "$dir"
echo "slurm-down: stopped and removed $dir" >&2
