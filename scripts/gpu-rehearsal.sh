#!/usr/bin/env bash
# Rehearses the GPU check without a GPU (make gpu-rehearsal, part of make
# test): builds the bundle (scripts/gpu-bundle.sh), unpacks it in a
# temporary directory as a GPU machine would, and runs its run.sh
# --rehearsal against the emulated CUDA driver (LD_LIBRARY_PATH). Every part
# must pass but the PyTorch peer, which must say it was skipped (no CUDA for
# PyTorch here); report.md must be written, with the transformers' decode
# step replayed and eager drawing the same tokens. Then, on a driver that
# reports no device, run.sh --quick must fail. So the bundle is never broken
# when a GPU comes, and never passes without one.
# Usage: scripts/gpu-rehearsal.sh [ARCHIVE]  (default: build dist/tolaria-gpu.tar.xz)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
archive=${1:-}
emu=$root/build/cuda-emulator
"$root/scripts/build-cuda-emulator.sh" "$emu" >/dev/null
if [ -z "$archive" ]; then
	archive=$root/dist/tolaria-gpu.tar.xz
	"$root/scripts/gpu-bundle.sh" "$archive"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tolaria-gpu-rehearsal.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$(dirname "$archive")" && sha256sum -c --quiet "$(basename "$archive").sha256")
tar -C "$work" -xJf "$archive"
res=$work/results
status=0
# The emulated driver answers for libcuda.so.1; python3 here has no CUDA
# for PyTorch (or no PyTorch), so the peer reports itself skipped.
LD_LIBRARY_PATH=$emu "$work/tolaria-gpu/run.sh" --rehearsal --budget 1200 "$res" || status=$?
report=$res/report.md
if [ ! -s "$report" ]; then
	echo "gpu-rehearsal: run.sh wrote no report.md" >&2
	exit 1
fi
bad=0
for part in first-light tests train bench sweep rl; do
	if ! grep -qE "^\| $part \| passed \|" "$report"; then
		echo "gpu-rehearsal: part $part did not pass on the emulated driver" >&2
		bad=1
	fi
done
# The transformers' decode step reaches the report, replayed and eager
# drawing the same tokens.
for preset in tiny-transformer transformer; do
	if ! grep -qE "^\| $preset \| [0-9]+ \| [0-9]+ \| [0-9]+ \| .* \| yes \|$" "$report"; then
		echo "gpu-rehearsal: the report has no decode step of $preset with the same tokens replayed and eager" >&2
		bad=1
	fi
done
if ! grep -qE '^\| peer \| skipped \|' "$report"; then
	echo "gpu-rehearsal: the PyTorch peer was not reported as skipped (no CUDA for PyTorch here)" >&2
	bad=1
fi
if [ "$bad" = 1 ] || [ "$status" != 0 ]; then
	cat "$report" >&2
	for log in "$res"/*.log; do
		echo "---- $log (last lines)" >&2
		tail -n 15 "$log" >&2
	done
	echo "gpu-rehearsal: FAILED (run.sh exit $status)" >&2
	exit 1
fi
# A machine without a GPU never passes: the same run on a driver that
# reports no device must fail every part it runs.
nogpu=$work/results-nogpu
if CUDAEMU_DEVICES=0 LD_LIBRARY_PATH=$emu "$work/tolaria-gpu/run.sh" --rehearsal --quick "$nogpu" >"$work/nogpu.log" 2>&1 ||
	grep -qE '^\| (first-light|tests|train|bench) \| passed \|' "$nogpu/report.md"; then
	cat "$work/nogpu.log" >&2
	echo "gpu-rehearsal: run.sh passed something on a driver with no device" >&2
	exit 1
fi
echo "gpu-rehearsal: every part passed on the emulated driver, the peer skipped; without a device every part failed; report:"
sed -n '/^## Parts/,/^## Training/p' "$report" | sed '$d'
