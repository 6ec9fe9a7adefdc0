#!/usr/bin/env bash
# compare_wait_policy.sh OUT.tsv: the peer (torch_mlp.py, width 256, 2
# threads, OpenBLAS's OpenMP build) with OMP_WAIT_POLICY left to libgomp's
# default (threads spin a while before they sleep) against PASSIVE (they
# sleep at once), alternating which goes first, 4 repeats at batch 8, 64,
# 256 and 1024. Each line: the median of 40 timed steps and the 1-minute
# load average before the run. Needs python3-torch and libopenblas0-openmp;
# run it from the repository root.
set -euo pipefail
out=${1:?usage: bench/peer/compare_wait_policy.sh OUT.tsv}
threads=${THREADS:-2}
printf 'repeat\tbatch\tomp_wait_policy\tstep_median_ms\tloadavg_1m\n' >"$out"
for rep in 1 2 3 4; do
	for b in 8 64 256 1024; do
		order="unset passive"
		((rep % 2)) || order="passive unset"
		for policy in $order; do
			load=$(cut -d' ' -f1 /proc/loadavg)
			/usr/bin/python3 bench/peer/torch_mlp.py --threads "$threads" --steps 40 --warmup-steps 6 \
				--batch-size "$b" --omp-wait-policy "$policy" |
				/usr/bin/python3 -c '
import json, statistics, sys
d = json.load(sys.stdin)
print("\t".join([sys.argv[1], sys.argv[2], sys.argv[3],
      "%.4f" % (statistics.median(d["step_seconds"]) * 1000), sys.argv[4]]))' "$rep" "$b" "$policy" "$load" >>"$out"
		done
	done
done
