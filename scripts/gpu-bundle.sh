#!/usr/bin/env bash
# Builds the GPU bundle: one archive holding everything a GPU machine without
# Go needs to check tolaria (make gpu-bundle):
#   tolaria, tolaria-worker (-tags cuda), run_graph_bench, the -tags cuda test
#   binary (tests/device_cuda.test), Fashion-MNIST (data/), the PyTorch peer
#   (peer/), VERSION, run.sh (scripts/gpu-run.sh) and its budget check
#   (budget-check.sh, scripts/gpu-budget-check.sh).
# Usage: scripts/gpu-bundle.sh [ARCHIVE]   (default dist/tolaria-gpu.tar.xz)
# Writes ARCHIVE and ARCHIVE.sha256 (one line, as sha256sum prints it), and
# fails when the archive is larger than 40 MiB: a GPU machine is lent with at
# most 64 MiB of files, the checkout included.
#
# The archive is xz (tar -xJf; Python's tarfile reads it too, where xz is
# missing). The dataset is carried uncompressed, which xz packs tighter
# than gzip; run.sh gzips it on the GPU machine. The binaries are stripped
# (-s -w).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
archive=${1:-$root/dist/tolaria-gpu.tar.xz}
case "$archive" in /*) ;; *) archive=$PWD/$archive ;; esac
limit=$((40 << 20))
cd "$root"
"$root/scripts/install-cuda.sh" >/dev/null
data=/usr/share/datasets/fashion-mnist
if ! ls "$data"/train-images-idx3-ubyte.gz >/dev/null 2>&1; then
	echo "gpu-bundle: $data has no Fashion-MNIST; install it with scripts/install-deps.sh train (package dataset-fashion-mnist)" >&2
	exit 1
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/tolaria-gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
b=$stage/tolaria-gpu
mkdir -p "$b/tests" "$b/data" "$b/peer"
echo "gpu-bundle: building"
go build -trimpath -ldflags='-s -w' -o "$b/" ./cmd/tolaria ./cmd/run_graph_bench
go build -trimpath -ldflags='-s -w' -tags cuda -o "$b/tolaria-worker" ./cmd/tolaria-worker
go test -trimpath -tags cuda -c -ldflags='-s -w' -o "$b/tests/device_cuda.test" ./device/cuda
# The dataset travels uncompressed: the archive's xz packs the raw files
# tighter than their gzip did (the training images 22.7 MB against
# 26.4 MB), and run.sh gzips them again, once, for the loader.
for f in "$data"/*-ubyte.gz; do
	gunzip -c "$f" >"$b/data/$(basename "${f%.gz}")"
done
cp bench/peer/torch_mlp.py bench/peer/torch_mlp_cuda.py bench/peer/torch_cnn_cuda.py "$b/peer/"
cp scripts/gpu-run.sh "$b/run.sh"
cp scripts/gpu-budget-check.sh "$b/budget-check.sh"
chmod +x "$b/run.sh" "$b/budget-check.sh"
{
	echo "tolaria $(git describe --always --dirty 2>/dev/null || echo unknown), built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go env GOVERSION) and $(nvcc --version | grep -o 'release [0-9.]*' || echo 'no nvcc')"
} >"$b/VERSION"

echo "gpu-bundle: compressing"
mkdir -p "$(dirname "$archive")"
tmp=$archive.partial
tar -C "$stage" -cf - tolaria-gpu | xz -9 -T2 >"$tmp"
size=$(stat -c %s "$tmp")
if [ "$size" -gt "$limit" ]; then
	rm -f "$tmp"
	echo "gpu-bundle: the archive is $size bytes, over the 40 MiB ($limit bytes) a GPU machine can be lent with the checkout; see what grew:" >&2
	du -ab "$b" | sort -n | tail -n 8 >&2
	exit 1
fi
mv "$tmp" "$archive"
(cd "$(dirname "$archive")" && sha256sum "$(basename "$archive")") >"$archive.sha256"
echo "gpu-bundle: $archive ($((size / 1024)) KiB of 40 MiB)"
echo "gpu-bundle: $(cat "$archive.sha256")"
echo "gpu-bundle: on the GPU machine: tar -xJf $(basename "$archive") && tolaria-gpu/run.sh   (--quick: the first parts only)"
