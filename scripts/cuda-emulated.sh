#!/usr/bin/env bash
# Runs device/cuda's GPU tests (go test -tags cuda -c ./device/cuda) on the
# emulated CUDA driver: builds the driver and the test binary, checks that
# the driver exports every cu* symbol the CUDA builds of tolaria import,
# runs the tests with LD_LIBRARY_PATH selecting the driver, lists the tests
# that ran, and fails if any failed or skipped; then runs tolaria with the
# CUDA worker on the driver (e2e: train, sweep, eval, hung and wedged workers).
# Run by `make cuda-emulated`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/cuda-emulator
GO=${GO:-go}
"$root/scripts/build-cuda-emulator.sh" "$out"

# The driver's own rules, through the driver API (device/cuda/emulator/driver_test.cpp).
"${CXX:-g++}" -std=c++17 -O1 -pthread -Wall -Wextra -o "$out/driver_test" "$root/device/cuda/emulator/driver_test.cpp" \
	-I /usr/local/cuda/include -L "$out" -l:libcuda.so.1
LD_LIBRARY_PATH="$out" "$out/driver_test" "$root/device/cuda/kernels/tolaria.ptx" 2>"$out/driver_test.log" ||
	{ cat "$out/driver_test.log" >&2; echo "cuda-emulated: the emulated driver breaks its rules (docs/cuda.md)" >&2; exit 1; }
LD_LIBRARY_PATH="$out" CUDAEMU_FAULTS='cuStreamCreate:2:999,cuLaunchKernel:1:700' "$out/driver_test" "$root/device/cuda/kernels/tolaria.ptx" faults \
	2>>"$out/driver_test.log" || { echo "cuda-emulated: fault injection does not fail the 2nd cuStreamCreate, or an illegal address is not sticky" >&2; exit 1; }
# CUDA_VISIBLE_DEVICES on a machine of CUDAEMU_DEVICES devices: the listed
# ones, in the list's order, up to the first entry that is no device.
for visible in '4|2,0,9,1|2,0' '4|3,3,1|3' '4||' '3|-|0,1,2' '2|1,x,0|1'; do
	IFS='|' read -r n list want <<<"$visible"
	if [ "$list" = - ]; then
		env -u CUDA_VISIBLE_DEVICES LD_LIBRARY_PATH="$out" CUDAEMU_DEVICES="$n" "$out/driver_test" "$root/device/cuda/kernels/tolaria.ptx" visible "$want," >/dev/null 2>>"$out/driver_test.log"
	else
		LD_LIBRARY_PATH="$out" CUDAEMU_DEVICES="$n" CUDA_VISIBLE_DEVICES="$list" "$out/driver_test" "$root/device/cuda/kernels/tolaria.ptx" visible "$want," >/dev/null 2>>"$out/driver_test.log"
	fi || { cat "$out/driver_test.log" >&2; echo "cuda-emulated: with $n devices, CUDA_VISIBLE_DEVICES=$list does not show the devices $want" >&2; exit 1; }
done

cd "$root"
"$GO" test -tags cuda -c -o "$out/device_cuda.test" ./device/cuda
"$GO" build -tags cuda -o "$out/tolaria-worker" ./cmd/tolaria-worker
# The same tests built against CUDA 12's graph update prototype
# (device/cuda/testdata/cuda12): the cgo must compile there too and call
# cuGraphExecUpdate_v2.
CGO_CFLAGS="-I$root/device/cuda/testdata/cuda12 ${CGO_CFLAGS:-}" \
	"$GO" test -tags cuda -c -o "$out/device_cuda12.test" ./device/cuda
imports12=$(nm -D --undefined-only "$out/device_cuda12.test")
if ! grep -qw cuGraphExecUpdate_v2 <<<"$imports12"; then
	echo "cuda-emulated: built against CUDA 12 prototypes, device/cuda does not call cuGraphExecUpdate_v2" >&2
	exit 1
fi

# Every driver symbol a CUDA build imports must be exported by the emulator
# (it answers CUDA_ERROR_NOT_SUPPORTED for those it does not emulate), and
# listed in symbols.txt, from which the unsupported entry points are made.
nm -D --defined-only "$out/libcuda.so.1" | awk '{print $3}' | sort -u >"$out/exported.txt"
missing=0
for bin in "$out/device_cuda.test" "$out/device_cuda12.test" "$out/tolaria-worker"; do
	nm -D --undefined-only "$bin" | awk '$2 ~ /^cu/ {print $2}' | sort -u >"$out/imported.txt"
	if ! comm -23 "$out/imported.txt" "$out/exported.txt" >"$out/missing.txt" || [ -s "$out/missing.txt" ]; then
		echo "cuda-emulated: $(basename "$bin") imports driver symbols the emulator lacks; add them to device/cuda/emulator/symbols.txt (and implement them if they are reached):" >&2
		cat "$out/missing.txt" >&2
		missing=1
	fi
done
[ "$missing" = 0 ] || exit 1

log=$out/device_cuda.log
cd "$root/device/cuda"
status=0
LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TOLARIA_REQUIRE_EMULATION=1 \
	"$out/device_cuda.test" -test.v -test.count=1 -test.timeout=10m >"$log" 2>&1 || status=$?
ran=$(grep -cE '^--- (PASS|FAIL|SKIP)' "$log" || true)
echo "cuda-emulated: the GPU tests on the emulated driver ($ran top-level tests; full log $log):"
grep -E '^--- (PASS|FAIL|SKIP)' "$log" | sed 's/^/  /'
if grep -qE -- '--- SKIP' "$log"; then
	echo "cuda-emulated: tests skipped on the emulated driver; every test must run:" >&2
	grep -E -- '--- SKIP' -A2 "$log" >&2
	exit 1
fi
if [ "$status" != 0 ] || [ "$ran" = 0 ]; then
	tail -n 60 "$log" >&2
	echo "cuda-emulated: the GPU tests failed on the emulated driver (status $status)" >&2
	exit 1
fi

# Without a device the GPU tests must fail, saying so, rather than pass
# having tested nothing.
if CUDAEMU_DEVICES=0 LD_LIBRARY_PATH="$out" "$out/device_cuda.test" >"$out/nodevice.log" 2>&1 ||
	! grep -q 'no CUDA device' "$out/nodevice.log"; then
	cat "$out/nodevice.log" >&2
	echo "cuda-emulated: the GPU tests did not fail with \"no CUDA device\" on a driver without a device" >&2
	exit 1
fi

# The CUDA 12 build's graph updates (the conformance suite updates executables).
if ! LD_LIBRARY_PATH="$out" "$out/device_cuda12.test" -test.run '^(TestConformance|TestUpdateNamesTheDriversReason)$' -test.count=1 >"$out/device_cuda12.log" 2>&1; then
	tail -n 40 "$out/device_cuda12.log" >&2
	echo "cuda-emulated: the conformance suite built against CUDA 12 prototypes failed on the emulated driver" >&2
	exit 1
fi

# The conformance suite built with -race: Destroy racing launches, records,
# updates and synchronisations on other goroutines, and updates racing
# launches, must show no data race.
(cd "$root" && "$GO" test -race -tags cuda -c -o "$out/device_cuda_race.test" ./device/cuda)
if ! LD_LIBRARY_PATH="$out" "$out/device_cuda_race.test" -test.run '^TestConformance$' -test.count=1 >"$out/device_cuda_race.log" 2>&1; then
	tail -n 60 "$out/device_cuda_race.log" >&2
	echo "cuda-emulated: the conformance suite built with -race failed on the emulated driver" >&2
	exit 1
fi

# Fault injection: with every cuMemAlloc failing with
# CUDA_ERROR_OUT_OF_MEMORY, the pool's test must fail and say so.
fault=$out/fault.log
if LD_LIBRARY_PATH="$out" CUDAEMU_FAULTS='cuMemAlloc_v2:*:2' \
	"$out/device_cuda.test" -test.run '^TestMemoryLimitAndPoolReuse$' -test.count=1 >"$fault" 2>&1 ||
	! grep -q 'out of memory' "$fault"; then
	cat "$fault" >&2
	echo "cuda-emulated: an injected CUDA_ERROR_OUT_OF_MEMORY did not fail TestMemoryLimitAndPoolReuse with an out-of-memory error" >&2
	exit 1
fi

# RL in lockstep on the emulated driver: two agents' actor and learner
# processes end with the same bits as the one-process loop (rl/dqn).
cd "$root"
"$GO" test -tags cuda -c -o "$out/rl_dqn.test" ./rl/dqn
if ! (cd "$root/rl/dqn" && LD_LIBRARY_PATH="$out" "$out/rl_dqn.test" -test.run '^TestLockstepProcessesEqualSequential$' -test.count=1 -test.v >"$out/rl_lockstep.log" 2>&1) ||
	! grep -q -- '--- PASS: TestLockstepProcessesEqualSequential' "$out/rl_lockstep.log"; then
	tail -n 40 "$out/rl_lockstep.log" >&2
	echo "cuda-emulated: RL processes in lockstep did not equal the one-process loop on the emulated driver" >&2
	exit 1
fi

# tolaria train --device cuda --enable-graphs through the CUDA worker on the
# emulated driver, and injected driver errors as the user sees them.
cd "$root"
TOLARIA_REQUIRE_EMULATION=1 "$GO" test -count=1 -run '^TestCUDAWorkerOnTheEmulatedDriver$' -v ./e2e/ >"$out/e2e.log" 2>&1 ||
	{ tail -n 60 "$out/e2e.log" >&2; echo "cuda-emulated: tolaria on the CUDA worker failed on the emulated driver" >&2; exit 1; }
grep -E -- '--- (PASS|FAIL|SKIP)' "$out/e2e.log" | sed 's/^/  e2e: /'
if grep -q -- '--- SKIP' "$out/e2e.log"; then
	echo "cuda-emulated: the e2e run on the emulated driver skipped" >&2
	exit 1
fi
echo "cuda-emulated: all $ran tests passed on the emulated driver; the conformance suite passed built against CUDA 12 prototypes and built with -race; an injected cuMemAlloc failure reached the caller as out of memory; tolaria trained, swept and evaluated on CUDA workers (the coordinator mapped no libcuda)"
