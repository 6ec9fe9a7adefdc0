#!/usr/bin/env bash
# Installs the CUDA 11.8 toolkit (nvcc, cuda.h, libcuda stubs) from Debian bookworm's
# non-free component, so that `go build -tags cuda` links and nvcc can compile the kernels
# to PTX on a machine without a GPU. Idempotent: does nothing when nvcc and cuda.h exist.
set -euo pipefail

have_cuda() {
	command -v nvcc >/dev/null 2>&1 || return 1
	local d
	for d in /usr/include /usr/local/cuda/include; do
		[ -f "$d/cuda.h" ] && return 0
	done
	return 1
}

if have_cuda; then
	echo "install-cuda: nvcc and cuda.h already present; nothing to do"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi

main_sources=/etc/apt/sources.list.d/debian.sources
nonfree_sources=/etc/apt/sources.list.d/debian-nonfree.sources

# Reuse the URI of the configured Debian archive (a mirror or snapshot may be pinned there).
uri=http://deb.debian.org/debian
if [ -f "$main_sources" ]; then
	found=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$main_sources")
	[ -n "$found" ] && uri=$found
fi

if [ ! -f "$nonfree_sources" ]; then
	echo "install-cuda: adding $nonfree_sources ($uri, contrib non-free)"
	$SUDO tee "$nonfree_sources" >/dev/null <<SOURCES
Types: deb
URIs: $uri
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends nvidia-cuda-toolkit

if ! have_cuda; then
	echo "install-cuda: nvidia-cuda-toolkit installed but nvcc or cuda.h is still missing" >&2
	exit 1
fi
echo "install-cuda: $(nvcc --version | tail -n 1)"
