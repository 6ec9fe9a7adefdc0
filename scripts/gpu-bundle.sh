#!/usr/bin/env bash
# Builds everything a GPU machine without Go needs into one folder:
#   tolaria, tolaria-worker (-tags cuda), run_graph_bench, the -tags cuda test
#   binaries, and run.sh, which runs them all and writes results/.
# Usage: scripts/gpu-bundle.sh [DIR]   (default dist/gpu-bundle)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist/gpu-bundle}
cd "$root"
"$root/scripts/install-cuda.sh" >/dev/null
rm -rf "$out"
mkdir -p "$out/tests"
# Stripped binaries keep the bundle small enough to carry.
go build -ldflags='-s -w' -o "$out/" ./cmd/tolaria ./cmd/run_graph_bench
go build -ldflags='-s -w' -tags cuda -o "$out/tolaria-worker" ./cmd/tolaria-worker
if [ -d /usr/share/datasets/fashion-mnist ]; then
	mkdir -p "$out/data"
	cp /usr/share/datasets/fashion-mnist/*.gz "$out/data/"
fi
for pkg in $(go list -tags cuda -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./device/cuda/...); do
	name=$(echo "${pkg#github.com/tolaria-ml/tolaria/}" | tr / _)
	go test -tags cuda -c -ldflags='-s -w' -o "$out/tests/$name.test" "$pkg"
done
cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the tolaria GPU checks on a machine with an NVIDIA GPU and driver.
# Exits 0 only when every check passed; a machine without a GPU fails (the
# test binaries say "no CUDA device"), it is never counted as a pass.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
res=${1:-$here/results}
mkdir -p "$res"
failed=()
fail() { failed+=("$1"); }
if ! nvidia-smi >"$res/nvidia-smi.txt" 2>&1; then
	echo "run.sh: nvidia-smi failed (no NVIDIA driver or GPU?); see $res/nvidia-smi.txt"
fi
for t in "$here"/tests/*.test; do
	name=$(basename "$t" .test)
	echo "== $name"
	if (cd "$here/tests" && "$t" -test.v -test.count=1) >"$res/$name.log" 2>&1; then
		tail -n 3 "$res/$name.log"
	else
		fail "$name tests ($res/$name.log)"
		grep -m1 'no CUDA device' "$res/$name.log" || tail -n 3 "$res/$name.log"
		echo "FAIL $name"
	fi
	# The benchmarks, three counts each for benchstat.
	(cd "$here/tests" && "$t" -test.run '^$' -test.bench . -test.count=3) >"$res/$name.bench.txt" 2>&1 ||
		fail "$name benchmarks ($res/$name.bench.txt)"
	grep -E '^Benchmark' "$res/$name.bench.txt" || true
done
"$here/tolaria" train --device cuda --worker "$here/tolaria-worker" --enable-graphs --epochs 10 --data-dir "$here/data" \
	--run-dir "$res/train-cuda" --summary-json "$res/train-cuda.json" >"$res/train-cuda.log" 2>&1 || fail "train-cuda ($res/train-cuda.log)"
tail -n 5 "$res/train-cuda.log"
# The accuracy bar of the CPU device holds on CUDA too.
if [ ! -f "$res/train-cuda.json" ]; then
	fail "cuda accuracy (train-cuda wrote no summary)"
elif ! python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); ok=s["graph_enabled"] and s["test_accuracy"]>=0.89; print("cuda accuracy", s["test_accuracy"], "graphs", s["graph_enabled"], "PASS" if ok else "FAIL"); sys.exit(0 if ok else 1)' "$res/train-cuda.json"; then
	fail "cuda accuracy ($res/train-cuda.json)"
fi
"$here/run_graph_bench" --device cuda --worker "$here/tolaria-worker" --output "$res/bench-cuda.json" --plot "$res/bench-cuda.png" >"$res/bench-cuda.log" 2>&1 ||
	fail "bench-cuda ($res/bench-cuda.log)"
if [ ${#failed[@]} -gt 0 ]; then
	echo "run.sh: FAILED: ${#failed[@]} check(s):"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "run.sh: every GPU check passed"
RUN
chmod +x "$out/run.sh"
echo "gpu-bundle: $out"
ls -la "$out" "$out/tests"
