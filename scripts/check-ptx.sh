#!/usr/bin/env bash
# Fails when the committed device/cuda/kernels/tolaria.ptx differs from what
# the kernel sources compile to. Run by `make test`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
committed=$root/device/cuda/kernels/tolaria.ptx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/scripts/build-ptx.sh" "$tmp/tolaria.ptx"
if ! diff -u "$committed" "$tmp/tolaria.ptx" >"$tmp/diff"; then
	head -n 40 "$tmp/diff" >&2
	echo "PTX out of date: run make ptx" >&2
	exit 1
fi
echo "check-ptx: device/cuda/kernels/tolaria.ptx is up to date"
