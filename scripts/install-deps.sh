#!/usr/bin/env bash
# Installs what tolaria needs on Debian 12, idempotently.
#   install-deps.sh train   the Fashion-MNIST dataset (package dataset-fashion-mnist)
#   install-deps.sh test    the dataset, the fortunes text corpus (package fortunes),
#                           Prometheus/promtool, gcc/g++ (cgo, the kernel
#                           emulation test), OpenBLAS (the CPU GEMM benchmark's
#                           reference, -tags openblas), Slurm and munge (the one-node
#                           cluster of the Slurm launcher's tests, scripts/slurm-up.sh),
#                           node with the npm package hyparquet (the Parquet reader
#                           of the eval --predictions test),
#                           and the CUDA toolkit (nvcc, cuda.h; for the -tags cuda
#                           build and the PTX check)
#   install-deps.sh peer    the dataset, PyTorch for Debian's python3 (python3-torch)
#                           and OpenBLAS's OpenMP build (libopenblas0-openmp), for
#                           make bench-peer; never part of make test
# Go itself must already be installed (Go 1.26 or newer).
set -euo pipefail

what=${1:-train}
STATICCHECK_VERSION=v0.8.2 # honnef.co/go/tools; `staticcheck -version` prints "(0.8.2)"
HYPARQUET_VERSION=1.31.5   # npm; the Parquet reader of the eval --predictions test
root=$(cd "$(dirname "$0")/.." && pwd)

if ! command -v go >/dev/null 2>&1; then
	echo "install-deps: Go is not installed; install Go 1.26 or newer (https://go.dev/dl) and re-run" >&2
	exit 1
fi
gov=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n1.26\n' "$gov" | sort -V | head -n1)" != "1.26" ]; then
	echo "install-deps: Go $gov is too old; tolaria needs Go 1.26 or newer (https://go.dev/dl)" >&2
	exit 1
fi

if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

updated=
apt_install() {
	local missing=()
	for p in "$@"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "install-deps: missing ${missing[*]} and this is not a Debian/Ubuntu system; install them by hand" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}"
	if [ -z "$updated" ]; then
		$SUDO apt-get update -qq
		updated=1
	fi
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

case "$what" in
train)
	apt_install dataset-fashion-mnist
	;;
test)
	# gcc and libc6-dev for cgo (-race, the cuda build), g++ for the CUDA
	# kernels' CPU emulation test (device/cuda), git for the format check,
	# libopenblas-dev for the GEMM benchmark's reference (make gemm-ratio),
	# which make vet builds; slurm-wlm and munge for the Slurm launcher's
	# end-to-end tests (scripts/slurm-up.sh); fortunes for the text dataset's
	# test on a real English corpus (data/text_test.go).
	apt_install dataset-fashion-mnist fortunes prometheus gcc g++ libc6-dev git libopenblas-dev slurm-wlm munge
	"$root/scripts/install-cuda.sh"
	# node and the npm package hyparquet, the independent Parquet reader of
	# the tolaria eval --predictions test (e2e/predictions_test.go), into
	# ${XDG_CACHE_HOME:-$HOME/.cache}/tolaria/node, where the test looks.
	command -v node >/dev/null 2>&1 || apt_install nodejs
	command -v npm >/dev/null 2>&1 || apt_install npm
	hp="${XDG_CACHE_HOME:-$HOME/.cache}/tolaria/node"
	if ! grep -qs "\"version\": \"$HYPARQUET_VERSION\"" "$hp/node_modules/hyparquet/package.json"; then
		echo "install-deps: installing hyparquet $HYPARQUET_VERSION"
		mkdir -p "$hp"
		npm install --prefix "$hp" --no-audit --no-fund --no-save "hyparquet@$HYPARQUET_VERSION" >/dev/null
	fi
	# staticcheck, at a pinned version, into $(go env GOPATH)/bin.
	sc="$(go env GOPATH)/bin/staticcheck"
	if ! { [ -x "$sc" ] && "$sc" -version 2>/dev/null | grep -qF "(${STATICCHECK_VERSION#v})"; }; then
		echo "install-deps: installing staticcheck $STATICCHECK_VERSION"
		go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
	fi
	;;
peer)
	apt_install dataset-fashion-mnist python3-torch libopenblas0-openmp
	if ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
		echo "install-deps: /usr/bin/python3 cannot import torch though python3-torch is installed; the peer needs Debian's python3 with python3-torch" >&2
		exit 1
	fi
	if [ ! -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 ]; then
		echo "install-deps: /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 is missing; the peer runs on OpenBLAS's OpenMP build (libopenblas0-openmp, amd64)" >&2
		exit 1
	fi
	;;
*)
	echo "usage: install-deps.sh train|test|peer" >&2
	exit 2
	;;
esac
