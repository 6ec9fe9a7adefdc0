#!/usr/bin/env bash
# compare_blas.sh OUT.tsv: the peer (torch_mlp.py, width 256, 2 threads) on
# OpenBLAS's pthreads build, which Debian's python3-torch loads by default,
# against its OpenMP build (--blas openmp, the peer's default), alternating
# which goes first, 5 repeats at batch 64, 256 and 1024. Each line: the
# median of 40 timed steps, the library the peer loaded and the 1-minute
# load average before the run. OMP_WAIT_POLICY is left to libgomp's default
# unless POLICY names one (passive or active). Needs python3-torch,
# libopenblas0-pthread and libopenblas0-openmp; run it from the repository
# root.
set -euo pipefail
out=${1:?usage: bench/peer/compare_blas.sh OUT.tsv}
threads=${THREADS:-2}
printf 'repeat\tbatch\tblas\tlibrary\tstep_median_ms\tloadavg_1m\n' >"$out"
for rep in 1 2 3 4 5; do
	for b in 64 256 1024; do
		order="default openmp"
		((rep % 2)) || order="openmp default"
		for blas in $order; do
			load=$(cut -d' ' -f1 /proc/loadavg)
			/usr/bin/python3 bench/peer/torch_mlp.py --threads "$threads" --steps 40 --warmup-steps 6 \
				--batch-size "$b" --blas "$blas" --omp-wait-policy "${POLICY:-unset}" |
				/usr/bin/python3 -c '
import json, statistics, sys
d = json.load(sys.stdin)
print("\t".join([sys.argv[1], sys.argv[2], sys.argv[3], d["blas"],
      "%.4f" % (statistics.median(d["step_seconds"]) * 1000), sys.argv[4]]))' "$rep" "$b" "$blas" "$load" >>"$out"
		done
	done
done
