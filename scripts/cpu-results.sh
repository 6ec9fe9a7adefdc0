#!/usr/bin/env bash
# cpu-results.sh: the training runs behind docs/cpu-results.md.
#
#   scripts/cpu-results.sh interleaved OUT [PAIRS] [EPOCHS]
#       PAIRS pairs (default 8) of the default job on the CPU device, one run
#       with --enable-graphs and one without, EPOCHS epochs each (default 1).
#       The runs alternate and the order within a pair alternates too
#       (graphs first, then eager first, ...), so that a change in the
#       machine's load falls on both modes alike. OUT/runs.tsv has one line
#       per run and OUT/pairs.tsv, for each pair, the graphs/eager ratio of
#       samples per second and the eager/graphs ratio of the process's CPU
#       time (user + system): above 1, graphs are faster or use less CPU.
#   scripts/cpu-results.sh versus OUT OTHER [PAIRS] [EPOCHS]
#       PAIRS pairs (default 5) of the default job with graphs, one run of
#       bin/tolaria ("this") and one of the tolaria binary OTHER (another
#       build, e.g. an older commit's), EPOCHS epochs each (default 1),
#       alternating as above. OUT/pairs.tsv has, for each pair, the
#       this/other ratio of samples per second.
#   scripts/cpu-results.sh full OUT [EPOCHS]
#       One run with graphs, then one without, EPOCHS epochs each (default
#       10): accuracy, loss and parameters of the whole job.
#
# Each run's directory is OUT/<name> (its --run-dir), with output.txt (the
# command and what tolaria printed), loadavg.txt (/proc/loadavg just before
# the run started) and time.txt (the run's wall, user and system seconds)
# added; its checkpoint is removed. Needs bin/tolaria (make build), jq, and
# the Fashion-MNIST files (make deps-train). Other work on the machine shows
# in every time: compare the modes by the ratios of interleaved pairs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tolaria="$root/bin/tolaria"

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

[ $# -ge 2 ] || usage
mode=$1
out=$2
[ -x "$tolaria" ] || { echo "cpu-results: $tolaria not found; run make build first" >&2; exit 1; }
command -v jq >/dev/null || { echo "cpu-results: jq not found; install it (apt-get install jq)" >&2; exit 1; }
if [ -e "$out" ]; then
	echo "cpu-results: $out exists; give a new directory" >&2
	exit 2
fi
mkdir -p "$out"

# run NAME EPOCHS [FLAGS...]: one training run, kept as OUT/NAME.
run() {
	local name=$1 epochs=$2
	shift 2
	local dir="$out/$name" load output
	load="$(cat /proc/loadavg)"
	echo "cpu-results: ${bin:-bin/tolaria} train --device cpu --epochs $epochs --run-dir $dir $*" >&2
	local status=0 tmp times
	tmp="$(mktemp)"
	# The shell's time keyword: wall, user and system seconds of the run.
	TIMEFORMAT='%R %U %S'
	{ time "${bin:-$tolaria}" train --device cpu --epochs "$epochs" --run-dir "$dir" "$@" >"$tmp" 2>&1 || status=$?; } 2>"$tmp.time"
	times="$(tail -n 1 "$tmp.time")"
	mkdir -p "$dir"
	{ printf '$ %s train' "${bin:-bin/tolaria}"; printf ' --device cpu --epochs %s --run-dir %s %s\n' "$epochs" "$dir" "$*"; cat "$tmp"; } >"$dir/output.txt"
	rm -f "$tmp" "$tmp.time"
	if [ "$status" -ne 0 ]; then
		echo "cpu-results: the run failed (exit status $status); its output is in $dir/output.txt" >&2
		exit 1
	fi
	echo "$load" >"$dir/loadavg.txt"
	echo "$times" | awk '{printf "wall_seconds %s\nuser_seconds %s\nsystem_seconds %s\n", $1, $2, $3}' >"$dir/time.txt"
	rm -f "$dir/checkpoint.tlck" "$dir/.tolaria.lock"
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" \
		"$(jq -r '.graph_enabled' "$dir/summary.json")" \
		"$(jq -r '.samples_per_second' "$dir/summary.json")" \
		"$(jq -r '.epoch_seconds | add / length' "$dir/summary.json")" \
		"$(echo "$times" | awk '{print $2 + $3}')" \
		"$(cut -d' ' -f1 "$dir/loadavg.txt")" >>"$out/runs.tsv"
}

printf 'run\tgraphs\tsamples_per_second\tmean_epoch_seconds\tcpu_seconds\tloadavg_1m\n' >"$out/runs.tsv"
case $mode in
interleaved)
	pairs=${3:-8}
	epochs=${4:-1}
	printf 'pair\tgraphs_samples_per_second\teager_samples_per_second\tgraphs_over_eager\teager_cpu_over_graphs_cpu\n' >"$out/pairs.tsv"
	for ((i = 1; i <= pairs; i++)); do
		if ((i % 2)); then
			run "pair$i-graphs" "$epochs" --enable-graphs
			run "pair$i-eager" "$epochs"
		else
			run "pair$i-eager" "$epochs"
			run "pair$i-graphs" "$epochs" --enable-graphs
		fi
		g=$(jq -r '.samples_per_second' "$out/pair$i-graphs/summary.json")
		e=$(jq -r '.samples_per_second' "$out/pair$i-eager/summary.json")
		gc=$(awk '$1 == "pair'"$i"'-graphs" {print $5}' "$out/runs.tsv")
		ec=$(awk '$1 == "pair'"$i"'-eager" {print $5}' "$out/runs.tsv")
		printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$g" "$e" "$(jq -n "$g / $e * 10000 | round / 10000")" \
			"$(jq -n "$ec / $gc * 10000 | round / 10000")" >>"$out/pairs.tsv"
	done
	;;
versus)
	[ $# -ge 3 ] || usage
	other=$3
	pairs=${4:-5}
	epochs=${5:-1}
	[ -x "$other" ] || { echo "cpu-results: $other is not an executable" >&2; exit 1; }
	printf 'pair\tthis_samples_per_second\tother_samples_per_second\tthis_over_other\n' >"$out/pairs.tsv"
	for ((i = 1; i <= pairs; i++)); do
		if ((i % 2)); then
			bin= run "pair$i-this" "$epochs" --enable-graphs
			bin=$other run "pair$i-other" "$epochs" --enable-graphs
		else
			bin=$other run "pair$i-other" "$epochs" --enable-graphs
			bin= run "pair$i-this" "$epochs" --enable-graphs
		fi
		a=$(jq -r '.samples_per_second' "$out/pair$i-this/summary.json")
		b=$(jq -r '.samples_per_second' "$out/pair$i-other/summary.json")
		printf '%s\t%s\t%s\t%s\n' "$i" "$a" "$b" "$(jq -n "$a / $b * 10000 | round / 10000")" >>"$out/pairs.tsv"
	done
	;;
full)
	epochs=${3:-10}
	run graphs "$epochs" --enable-graphs
	run eager "$epochs"
	;;
*)
	usage
	;;
esac
echo "cpu-results: done; see $out/runs.tsv" >&2
