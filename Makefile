# tolaria — make targets. `make train` and `make test` are the README's two
# commands; both install what they need (Debian packages) first.

GO      ?= go
BIN     ?= bin
DIST    ?= dist/tolaria-gpu.tar.xz
ARGS    ?=
GOFLAGS_TEST ?= -race -timeout 20m

.PHONY: all build deps-train deps-test train test vet staticcheck fmt-check unit cuda-build \
        ptx check-ptx infra generate check-generated e2e accuracy worker-cuda \
        gpu-bundle gpu-rehearsal bench run_graph_bench mutate clean cuda-emulator cuda-emulated deps-peer bench-peer \
        gemm-ratio openblas-check

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/tolaria ./cmd/tolaria-worker ./cmd/run_graph_bench ./cmd/tolaria-gen

deps-train:
	scripts/install-deps.sh train

deps-test:
	scripts/install-deps.sh test

# The main job: the default MLP on Fashion-MNIST with graphs, on the CPU device.
train: deps-train build
	$(BIN)/tolaria train --device cpu --enable-graphs $(ARGS)

# The whole test suite (what .ci/run runs).
test: deps-test fmt-check vet staticcheck unit cuda-build cuda-emulated gpu-rehearsal check-ptx infra check-generated accuracy
	@echo "make test: all checks passed"

fmt-check:
	@files=$$(git ls-files '*.go'); if [ -z "$$files" ]; then echo "fmt-check: git lists no Go files"; exit 1; fi; \
	out=$$(gofmt -l $$files); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: openblas-check
	$(GO) vet ./...
	$(GO) vet -tags cuda ./...
	$(GO) vet -tags testhooks ./...
	$(GO) vet -tags openblas ./device/cpu/...

# The CPU device does not use OpenBLAS; its GEMM benchmark compares with it
# (device/cpu/internal/openblas, built with -tags openblas).
openblas-check:
	@printf '#include <cblas.h>\nint main(void){openblas_set_num_threads(1);return 0;}\n' | \
	$${CC:-gcc} -x c - -o /dev/null -lopenblas 2>/dev/null || \
	{ echo "OpenBLAS (cblas.h, libopenblas.so) is missing: the GEMM benchmark (-tags openblas) needs it; install Debian's libopenblas-dev (scripts/install-deps.sh test does)" >&2; exit 1; }

# The CPU device's GEMM against OpenBLAS's cblas_sgemm on the default MLP's
# shapes, same thread count (THREADS, default GOMAXPROCS), one table.
THREADS ?=
gemm-ratio: openblas-check
	TOLARIA_GEMM_RATIO=1 TOLARIA_GEMM_THREADS=$(THREADS) $(GO) test -tags openblas -count=1 -run TestGemmRatio -v ./device/cpu/

# staticcheck, installed by deps-test into $(GOPATH)/bin.
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
staticcheck:
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags cuda ./...
	$(STATICCHECK) -tags testhooks ./cmd/... ./job/...

# Includes ./e2e: the binaries end to end, and a real Prometheus, which the
# test command requires (deps-test installs it).
unit:
	TOLARIA_E2E_REQUIRE_PROMETHEUS=1 TOLARIA_E2E_REQUIRE_SLURM=1 TOLARIA_E2E_REQUIRE_PARQUET_READER=1 TOLARIA_REQUIRE_EMULATION=1 $(GO) test $(GOFLAGS_TEST) ./...

# Everything builds with -tags cuda, test binaries included; they run on a GPU.
cuda-build:
	$(GO) build -tags cuda ./...
	$(GO) test -tags cuda -c -o /dev/null ./device/cuda

# The emulated CUDA driver (device/cuda/emulator), as
# build/cuda-emulator/libcuda.so.1; select it with LD_LIBRARY_PATH.
cuda-emulator:
	scripts/build-cuda-emulator.sh

# device/cuda's GPU tests on the emulated driver; fails if any fails or skips.
cuda-emulated:
	GO=$(GO) scripts/cuda-emulated.sh

ptx:
	scripts/build-ptx.sh

check-ptx:
	scripts/check-ptx.sh

infra:
	scripts/check-infra.sh

generate:
	$(GO) run ./cmd/tolaria-gen -out .

check-generated:
	$(GO) test -count=1 ./cmd/tolaria-gen/ ./telemetry/...

# End-to-end checks alone (they also run in `unit`).
e2e:
	TOLARIA_E2E_REQUIRE_PROMETHEUS=1 TOLARIA_E2E_REQUIRE_SLURM=1 TOLARIA_E2E_REQUIRE_PARQUET_READER=1 $(GO) test -count=1 -timeout 20m ./e2e/

# The accuracy bars: default MLP, 10 epochs, graphs on, CPU device, >= 0.89;
# examples/cnn.yaml's CNN, 5 epochs, graphs on, CPU device, >= 0.92.
accuracy:
	TOLARIA_E2E_ACCURACY=1 $(GO) test -count=1 -timeout 20m -run '^Test(CNN|CharTransformer)?Accuracy$$' -v ./e2e/

worker-cuda:
	$(GO) build -tags cuda -o $(BIN)/tolaria-worker ./cmd/tolaria-worker

# One archive to carry to a GPU machine without Go (at most 40 MiB):
# binaries, the cuda test binary, Fashion-MNIST, the PyTorch peer and run.sh.
# docs/gpu-results.md says how to run it and what to do with its report.
gpu-bundle:
	scripts/gpu-bundle.sh $(DIST)

# The bundle unpacked and its run.sh --rehearsal run on the emulated CUDA
# driver: every part but the PyTorch peer (skipped: no CUDA for PyTorch) must
# pass. Part of make test, so the bundle works when a GPU comes.
gpu-rehearsal:
	scripts/gpu-rehearsal.sh

run_graph_bench:
	$(GO) build -o $(BIN)/run_graph_bench ./cmd/run_graph_bench

bench: build
	$(BIN)/run_graph_bench $(ARGS)

deps-peer:
	scripts/install-deps.sh peer

# Side by side with PyTorch on the CPU (bench/peer/torch_mlp.py), not part of
# make test: installs python3-torch and OpenBLAS's OpenMP build, then runs
# tolaria's step (graphs on) and the peer's alternately. The default is quick
# (width 256 at batch 64 and 256); docs/cpu-results.md has the full grid:
#   make bench-peer ARGS='--peer-batch-sizes 8,64,256,1024 --peer-widths 128,256,512,1024,2048'
bench-peer: deps-peer run_graph_bench
	$(BIN)/run_graph_bench --peer torch $(ARGS)

# Mutation testing, not part of `make test` (it is slow on purpose): gremlins
# (pinned and installed by scripts/mutate.sh) changes one operator at a time in
# a package's code and runs that package's tests, one test run at a time, so
# the machine stays usable. A package takes minutes; docs/testing.md records
# how long each took, the survivors and why each is acceptable.
#   make mutate                  every package in MUTATE_PKGS
#   make mutate PKGS=./trainer   one package (or a few, space-separated)
#   make mutate DIFF=main        only the lines changed since the merge base with main
# Results: .mutate/<package>.json (gremlins' report) and .mutate/<package>.log.
MUTATE_PKGS ?= ./device/cpu ./graphs ./staging ./trainer ./bench ./data ./coordinator
PKGS ?= $(MUTATE_PKGS)
DIFF ?=
mutate:
	scripts/mutate.sh $(if $(DIFF),-diff $(DIFF)) $(PKGS)

clean:
	rm -rf $(BIN) dist build
