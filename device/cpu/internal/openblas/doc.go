// Package openblas calls OpenBLAS's cblas_sgemm through cgo, for the
// benchmark that measures the CPU device's GEMM against it
// (device/cpu TestGemmRatio). The device itself does not use it. It is
// built only with -tags openblas, which needs Debian's libopenblas-dev
// (scripts/install-deps.sh test installs it; `make gemm-ratio` runs the
// benchmark).
package openblas
