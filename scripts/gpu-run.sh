#!/usr/bin/env bash
# run.sh: tolaria's whole GPU check, carried in the GPU bundle
# (scripts/gpu-bundle.sh copies this file there as run.sh).
#
#   ./run.sh [--quick] [--rehearsal] [--budget SECONDS] [RESULTS_DIR]
#
# Runs, in this order, each part under its own time limit, writing its
# result (results/parts/NAME.json) and log as soon as it ends, so that a run
# cut short still leaves the most important results:
#
#   first-light  open the GPU: device, driver, the kernels' PTX through the JIT
#   tests        device/cuda's GPU tests (conformance, seed failure, replay =
#                eager bitwise, trainer captures, step against the CPU device)
#   train        tolaria train --device cuda --enable-graphs on Fashion-MNIST
#   bench        run_graph_bench --device cuda: the default MLP and the tiny
#                preset at batch 64 and 1024 (128 in a rehearsal), the
#                CNN of examples/cnn.yaml at 64 and 256 (8 in a rehearsal),
#                and the tiny and the example transformer at 16 and 64 (2
#                and 1 in a rehearsal), eager against graphs, with the
#                transformers' decode step (batch 1) eager against replayed
#   --quick stops here
#   peer         PyTorch on the same GPU: the same steps eager, with CUDA graphs
#                and with torch.compile(mode="reduce-overhead"); and the
#                example CNN eager (peer-cnn.json)
#   sweep        4 trials at --per-device 4 under a device-memory budget that
#                makes a trial of higher priority park the ones in its way
#   budget       a trial's budget bill (its buffers and the CUDA context it
#                measured) against the driver's used memory for its worker
#                process (budget-check.sh, results/budget.json)
#   rl           tolaria rl --device cuda --agents 2 for a bounded number of steps
#
# and ends by writing results/report.md (run_graph_bench gpu-report).
# Exit status: 0 only when every part passed (the peer may be skipped: no
# PyTorch with CUDA); a machine without a GPU never passes.
#
# --rehearsal runs every part at a size the emulated driver finishes in a
# few minutes (make gpu-rehearsal): one epoch on a tenth of Fashion-MNIST
# with its own accuracy bar, fewer steps, shorter sweeps and agents. It
# checks the bundle, not the GPU; its figures mean nothing.
# --budget bounds the whole run (default 470 s, 175 s with --quick): a part
# gets at most the time left, and a part with less than 20 s left is
# reported as not run.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
quick=0
profile=gpu
budget=
res=
only=
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1 ;;
	--rehearsal) profile=rehearsal ;;
	--part)
		# Internal: run one part's body (run.sh runs itself so that
		# timeout can bound the part).
		shift
		only=${1:-}
		;;
	--budget)
		shift
		budget=${1:-}
		case "$budget" in '' | *[!0-9]*) echo "run.sh: --budget wants whole seconds, got '${budget}'" >&2; exit 2 ;; esac
		;;
	-h | --help) sed -n '2,42p' "$0"; exit 0 ;;
	-*) echo "run.sh: unknown flag $1 (see ./run.sh --help)" >&2; exit 2 ;;
	*) res=$1 ;;
	esac
	shift
done
res=${res:-$here/results}
# The whole run within 8 minutes, --quick within 3, unless --budget says.
if [ -z "$budget" ]; then
	if [ "$quick" = 1 ]; then budget=175; else budget=470; fi
fi
case "$res" in /*) ;; *) res=$PWD/$res ;; esac

# The bundle carries the dataset uncompressed (see gpu-bundle.sh); the
# loader reads gzip: compress each file once, beside it.
for f in "$here"/data/*-ubyte; do
	[ -e "$f" ] && [ ! -e "$f.gz" ] || continue
	if command -v gzip >/dev/null 2>&1; then
		gzip -1 -c "$f" >"$f.gz.partial"
	else
		python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), gzip.open(sys.argv[2], "wb", 1))' "$f" "$f.gz.partial"
	fi && mv "$f.gz.partial" "$f.gz" || { echo "run.sh: cannot gzip $f for the loader" >&2; exit 1; }
done

bench=$here/run_graph_bench
worker=$here/tolaria-worker
started=$(date +%s)
failed=()

# The sizes of each part, per profile.
if [ "$profile" = rehearsal ]; then
	train_args=(--epochs 1 --world 10)
	accuracy_bar=0.75
	bench_args=(--epochs 2 --steps 20 --settle-steps 4 --probe-kernels 20)
	peer_args=(--steps 20 --warmup-steps 3 --rounds 1)
	bench_large=128
	cnn_batch=8
	cnn_args=(--epochs 1 --steps 8 --settle-steps 2 --probe-kernels -1)
	# A transformer step is slower still there (the example's, 15 s for
	# this whole run at batch 1): one small batch each, a few tokens.
	tiny_transformer_batch=2
	transformer_batch=1
	transformer_args=(--epochs 1 --steps 8 --settle-steps 2 --probe-kernels -1 --decode-tokens 8)
	sweep_examples=512
	sweep_long=20
	sweep_short=1
	# The big trial's layers: wide enough that its bill exceeds a small
	# trial's by a few MiB, which the emulated driver's exact contexts
	# leave room for (sweep()).
	sweep_big=512
	sweep_long_hidden=256
	rl_steps=1500
	# The emulated driver runs a GPU thread as a fiber: the CNN's
	# weight gradients (tl_gemm_klanes, 512 threads a block, a barrier
	# every 16 terms) take it seconds a step on two loaded cores.
	bench_limit=240
else
	train_args=(--epochs 10)
	accuracy_bar=0.89
	bench_args=()
	peer_args=(--steps 200 --warmup-steps 20 --rounds 3)
	bench_large=1024
	cnn_batch=64
	cnn_args=(--sweep-batch-sizes 256)
	# The example transformer's step is a few ms at batch 16 on an H100;
	# its tokens at batch 1 well under one.
	tiny_transformer_batch=16
	transformer_batch=16
	transformer_args=(--sweep-batch-sizes 64)
	sweep_examples=4096
	sweep_long=150
	# The short trial must outlast the long ones' asks for their budgets,
	# or the big one asks first and a long one waits instead of being
	# parked (18:43 UTC, docs/gpu-results.md: one long worker asked 1.7 s
	# after the start, its context made after the other two's under the
	# per-GPU lock, and the short trial had ended at 0.9 s). An epoch of
	# the short trial is about 0.03 s on an H100: 150 epochs are about 5 s.
	sweep_short=150
	# Parked, a long trial keeps its context and streams' scratch on the
	# GPU, so a park makes room only by the long trials' models: 1024
	# wide, tens of MiB each, a window that a MiB of difference between
	# two workers' measured contexts does not close; the big trial twice
	# as wide again.
	sweep_long_hidden=1024
	sweep_big=2048
	rl_steps=10000
	# mlp, tiny and cnn took 16 s on an H100; the two transformers add
	# two workers' start-up and about 10 s of steps and tokens.
	bench_limit=120
fi

# part NAME LIMIT: runs the part's body (run.sh --part NAME) under the
# limit (and the run's budget), its output in NAME.log, and records the
# outcome. The body exits 0 (passed), 3 (skipped) or anything else
# (failed; the log's first error lines, or its last lines, are the detail).
part() {
	local name=$1 limit=$2
	shift 2
	local log=$res/$name.log left=$((budget - ($(date +%s) - started)))
	if [ "$left" -lt 20 ]; then
		record "$name" "not run" 0 "$limit" "the run's budget of ${budget}s was spent before this part"
		failed+=("$name (not run: out of time)")
		echo "== $name: not run, the run's ${budget}s budget is spent"
		return 1
	fi
	[ "$limit" -gt "$left" ] && limit=$left
	echo "== $name (limit ${limit}s)"
	local t0 rc status detail=
	t0=$(date +%s.%N)
	timeout --kill-after=10 "$limit" "$0" --part "$name" $([ "$profile" = rehearsal ] && echo --rehearsal) "$res" >"$log" 2>&1
	rc=$?
	local secs
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
	case $rc in
	0) status=passed ;;
	3) status=skipped; detail=$(tail -n 1 "$log") ;;
	124 | 137) status=failed; detail="timed out after ${limit}s; last lines: $(tail -n 3 "$log" | tr '\n' ' ')" ;;
	*) status=failed; detail="exit $rc: $(grep -m 3 -E -- '--- FAIL|FAIL|panic|error|Error' "$log" | tr '\n' ' ')"
		[ "$detail" = "exit $rc: " ] && detail="exit $rc: $(tail -n 3 "$log" | tr '\n' ' ')" ;;
	esac
	record "$name" "$status" "$secs" "$limit" "$detail"
	echo "   $status in ${secs}s${detail:+: ${detail:0:300}}"
	[ "$status" = failed ] && failed+=("$name ($log)")
	[ "$status" != failed ]
}

# record NAME STATUS SECONDS LIMIT DETAIL writes parts/NAME.json.
record() {
	"$bench" gpu-check record --results "$res" --part "$1" --status "$2" --seconds "$3" --limit "$4" --detail "$5" ||
		echo "{\"part\":\"$1\",\"status\":\"$2\"}" >"$res/parts/$1.json"
}

first_light() {
	nvidia-smi >"$res/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed or is missing (see nvidia-smi.txt)"
	cd "$here/tests" && TOLARIA_FIRST_LIGHT_JSON=$res/first-light.json ./device_cuda.test -test.run '^TestFirstLight$' -test.v -test.count=1 || return 1
}

gpu_tests() {
	cd "$here/tests" && ./device_cuda.test -test.v -test.count=1 -test.timeout=10m || return 1
}

train() {
	"$here/tolaria" train --device cuda --worker "$worker" --enable-graphs "${train_args[@]}" --data-dir "$here/data" \
		--run-dir "$res/train" --summary-json "$res/train.json" || return 1
	"$bench" gpu-check train --summary "$res/train.json" --min-accuracy "$accuracy_bar"
}

bench_presets() {
	local p
	for p in mlp tiny; do
		"$bench" --device cuda --worker "$worker" --preset "$p" --batch-size 64 --sweep-batch-sizes "$bench_large" "${bench_args[@]}" \
			--output "$res/bench-$p.json" || return 1
	done
	# The CNN (examples/cnn.yaml): the image kernels on the GPU, captured
	# whole like the MLP's step.
	"$bench" --device cuda --worker "$worker" --preset cnn --batch-size "$cnn_batch" "${cnn_args[@]}" \
		--output "$res/bench-cnn.json" || return 1
	# The transformers (tiny: launches dominate; examples/char-transformer.yaml):
	# the training step, then the decode step tolaria sample replays per
	# token, eager against replayed.
	"$bench" --device cuda --worker "$worker" --preset tiny-transformer --batch-size "$tiny_transformer_batch" \
		"${transformer_args[@]}" --output "$res/bench-tiny-transformer.json" || return 1
	"$bench" --device cuda --worker "$worker" --preset transformer --batch-size "$transformer_batch" \
		"${transformer_args[@]}" --output "$res/bench-transformer.json"
}

peer() {
	if ! command -v python3 >/dev/null 2>&1; then
		echo "no python3: the PyTorch peer cannot run"
		return 3
	fi
	python3 "$here/peer/torch_mlp_cuda.py" --points mlp:64,mlp:1024,tiny:64,tiny:1024 "${peer_args[@]}" \
		--data-dir "$here/data" --output "$res/peer.json" || return
	# The example CNN in PyTorch, eager (peer-cnn.json), beside the bench's
	# cnn points; not in the report's table, which compares like with like.
	python3 "$here/peer/torch_cnn_cuda.py" >"$res/peer-cnn.json"
}

sweep() {
	# The budget grants the three small trials together; the big one
	# (priority 1, its model wider: on a GPU twice the long ones', so that
	# its bill exceeds theirs by tens of MiB, more than two workers'
	# contexts may differ by) starts when the short one ends (--parallel
	# 3), finds the two long ones holding memory and parks one of them
	# (each keeps its context, so a park makes room only by its model);
	# it stays parked while the big one runs, and unparks when it ends
	# (gpu-check sweep fails an unpark before that).
	# --per-device 4 lets every trial share cuda:0: the budget, not the
	# slot count, is what binds. The long trials must outlast the big
	# one, which starts when the short one ends (about 5 s on a GPU, see
	# sweep_short) and takes its worker's start-up and two epochs, a few
	# seconds more: on an H100 an epoch of 128 steps of the long trials'
	# model took about 0.12 s, so 150 epochs are about 18 s.
	cat >"$res/sweep.yaml" <<EOF
base:
  data: {dataset: synthetic, synthetic_size: $sweep_examples}
  schedule: {batch_size: 32, log_every: 32}
  graphs: {enabled: true}
  model: {hidden: [256, 256]}
trials:
  - {name: short, schedule: {epochs: $sweep_short}}
  - {name: long-a, schedule: {epochs: $sweep_long}, model: {hidden: [$sweep_long_hidden, $sweep_long_hidden]}}
  - {name: long-b, schedule: {epochs: $sweep_long}, model: {hidden: [$sweep_long_hidden, $sweep_long_hidden]}}
  - {name: big, priority: 1, schedule: {epochs: 2}, model: {hidden: [$sweep_big, $sweep_big]}}
EOF
	# The trials share one GPU. On the emulated driver, CUDAEMU_STATE makes
	# their workers share one emulated device and bills each worker's
	# context (256 MiB unless CUDAEMU_CONTEXT_BYTES says otherwise), as a
	# GPU does; a real driver ignores both.
	local emu=(CUDAEMU_STATE="$res/sweep-emu-state")
	# Each of a trial's streams holds the CUDA device's scratch (1 MiB),
	# and each trial's worker its CUDA context and modules (hundreds of
	# MiB on a GPU), both of which every trial's bill counts: the worker's
	# build reports them, the context as measured on this GPU.
	local info scratch context memory
	info=$(env "${emu[@]}" "$worker" info) || return 1
	echo "sweep: $info"
	scratch=$(sed -n 's/.* stream_scratch_bytes=\([0-9]*\).*/\1/p' <<<"$info")
	context=$(sed -n 's/.* context_bytes=\([0-9]*\).*/\1/p' <<<"$info")
	# The budget grants the three small ones together, and is too small
	# for the big one beside the two long ones: it lies midway between the
	# two (sweep-budget --park-for), each bill with its worker's context.
	memory=$("$bench" gpu-check sweep-budget --sweep "$res/sweep.yaml" --fit short,long-a,long-b --park-for big \
		--stream-scratch "${scratch:-0}" --context "${context:-0}") || return 1
	echo "sweep: --device-memory $memory (the three small trials together, not the big one beside the two long ones; a context of ${context:-0} bytes each)"
	env "${emu[@]}" "$here/tolaria" sweep "$res/sweep.yaml" --devices 0 --per-device 4 --parallel 3 --device-memory "$memory" \
		--worker "$worker" --sweep-dir "$res/sweep" || return 1
	"$bench" gpu-check sweep --dir "$res/sweep" --trials 4 --min-parks 1
}

# budget_check compares a trial's bill with the driver's figure for its
# worker (scripts/gpu-budget-check.sh, carried as budget-check.sh).
budget_check() {
	"$here/budget-check.sh" "$res" "$profile"
}

rl() {
	"$here/tolaria" rl --device cuda --worker "$worker" --agents 2 --total-steps "$rl_steps" --stop-when-solved=false \
		--run-dir "$res/rl" || return 1
	"$bench" gpu-check rl --dir "$res/rl" --agents 2
}

if [ -n "$only" ]; then
	case "$only" in
	first-light) first_light ;;
	tests) gpu_tests ;;
	train) train ;;
	bench) bench_presets ;;
	peer) peer ;;
	sweep) sweep ;;
	budget) budget_check ;;
	rl) rl ;;
	*) echo "run.sh: no part $only" >&2; exit 2 ;;
	esac
	exit
fi

# An earlier run's results are kept, moved aside, never overwritten.
if [ -d "$res" ] && [ -n "$(ls -A "$res")" ]; then
	old=$res.$(date +%Y%m%d-%H%M%S)
	mv "$res" "$old" || exit 1
	echo "run.sh: the earlier results are now in $old"
fi
mkdir -p "$res/parts" || exit 1
part first-light 45 first_light
part tests 150 gpu_tests
part train 90 train
part bench "$bench_limit" bench_presets
if [ "$quick" = 0 ]; then
	part peer 150 peer
	part sweep 120 sweep
	part budget 45 budget_check
	part rl 60 rl
fi

"$bench" gpu-report --results "$res" --profile "$profile" --output "$res/report.md" ||
	failed+=("report ($res/report.md not written)")
echo "run.sh: report in $res/report.md"
if [ ${#failed[@]} -gt 0 ]; then
	echo "run.sh: FAILED: ${#failed[@]} part(s):"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "run.sh: every part passed"
