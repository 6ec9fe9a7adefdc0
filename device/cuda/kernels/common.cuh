// Shared definitions for tolaria's kernels. Every kernel is extern "C" so
// that its PTX entry name is the plain name the Go side looks up.
//
// Determinism: no kernel uses atomics. Reductions run in double precision in
// a fixed order (a per-thread strided loop, then a fixed shared-memory tree),
// so the same inputs give the same bits on every launch, eager or replayed.
#pragma once

// Launch geometry. device/cuda/geometry.go holds the same numbers; a Go test
// checks them against the .maxntid directives in the PTX.
#define TL_BLOCK 256        // elementwise kernels and per-row loss reductions
#define TL_CLIP_BLOCK 1024  // the single block of tl_clip_global_norm
#define TL_TILE 32          // GEMM tile edge and column-sum block width
#define TL_TILE_ROWS 8      // GEMM and column-sum block height
#define TL_BN_ROWS 32       // batch-normalisation block height (TL_TILE columns wide)
#define TL_KLANES 16        // k lanes of tl_gemm_klanes (TL_TILE columns wide)

// Grid-stride loop over n elements.
#define TL_FOR_EACH(i, n)                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;     \
         i < (n); i += (long long)blockDim.x * gridDim.x)

// Activation codes, as device.Activation.
#define TL_ACT_NONE 0
#define TL_ACT_RELU 1
#define TL_ACT_GELU 2
#define TL_ACT_TANH 3

// sqrt(2/pi) for the tanh approximation of GELU.
#define TL_GELU_S 0.7978845608028654
#define TL_GELU_C 0.044715

// tl_block_sum reduces one double per thread over a block of exactly N
// threads (N a power of two) in a fixed tree and returns the sum to every
// thread. sh must hold N doubles.
template <int N>
__device__ __forceinline__ double tl_block_sum(double v, double *sh) {
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
#pragma unroll
    for (int s = N / 2; s > 0; s >>= 1) {
        if (t < (unsigned)s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// tl_lane_sum adds v over the TL_TILE lanes (threadIdx.x) of each row lane
// (threadIdx.y) of a TL_TILE×TL_TILE_ROWS block in a fixed tree (lane
// tx + h into lane tx, h = 16, 8, 4, 2, 1) and returns the row's sum to
// each of its threads. sh holds TL_TILE_ROWS×TL_TILE doubles. Every thread
// of the block must call it.
__device__ __forceinline__ double tl_lane_sum(double v, double (*sh)[TL_TILE]) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    sh[ty][tx] = v;
    __syncthreads();
#pragma unroll
    for (int h = TL_TILE / 2; h > 0; h >>= 1) {
        if (tx < h) sh[ty][tx] += sh[ty][tx + h];
        __syncthreads();
    }
    const double r = sh[ty][0];
    __syncthreads();
    return r;
}

// tl_class returns the class index a float label holds, or -1 when it is
// not an integer in [0, cols).
__device__ __forceinline__ int tl_class(float label, int cols) {
    if (!(label >= 0.0f && label < (float)cols)) return -1;
    const int c = (int)label;
    return (float)c == label ? c : -1;
}

// tl_mask_count is max(1, sum(mask)) over rows, computed by every block of
// TL_BLOCK threads in the same order.
__device__ __forceinline__ double tl_mask_count(int rows, const float *mask, double *sh) {
    double c = 0.0;
    for (int r = threadIdx.x; r < rows; r += TL_BLOCK) c += (double)mask[r];
    c = tl_block_sum<TL_BLOCK>(c, sh);
    return c < 1.0 ? 1.0 : c;
}
