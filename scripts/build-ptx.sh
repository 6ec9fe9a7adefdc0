#!/usr/bin/env bash
# Compiles device/cuda/kernels/tolaria.cu to PTX. With no argument it
# regenerates the committed device/cuda/kernels/tolaria.ptx (run by `make ptx`);
# with an argument it writes there instead (scripts/check-ptx.sh uses that).
#
# -fmad=false: additions and products are rounded separately, as in the Go
# CPU reference; compute_80 PTX is JIT-compiled by newer drivers for newer GPUs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/device/cuda/kernels/tolaria.ptx}

if ! command -v nvcc >/dev/null 2>&1; then
	echo "build-ptx: nvcc not found; run scripts/install-cuda.sh first" >&2
	exit 1
fi

# Compile from the kernels directory with a relative input path so that the
# output does not depend on where the repository is checked out.
cd "$root/device/cuda/kernels"
nvcc -ptx -arch=compute_80 -fmad=false -o "$out" tolaria.cu
