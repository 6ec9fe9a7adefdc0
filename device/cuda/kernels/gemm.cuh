// C = alpha*op(A)*op(B) + beta*C, row-major. op(A) is m×k (A stored k×m when
// transA), op(B) is k×n (B stored n×k when transB). A block of 32×8 threads
// computes a 32×32 tile of C, each thread four rows of one column. Products of
// two floats are exact in double, and each dot product is summed in double
// in increasing k, so the result does not depend on the tiling.
#pragma once
#include "common.cuh"

// tl_gemm_tile is one block's work on the tile of C at (row0, col0), for
// tl_gemm and tl_gemm_batched; As and Bs are the block's shared tiles.
__device__ __forceinline__ void tl_gemm_tile(int transA, int transB, int m, int n, int k, float alpha,
                                             const float *__restrict__ A, const float *__restrict__ B, float beta,
                                             float *__restrict__ C, int row0, int col0,
                                             float (*As)[TL_TILE + 1], float (*Bs)[TL_TILE + 1]) {
    // As[i][kk] = op(A)[row0+i][k0+kk], Bs[kk][j] = op(B)[k0+kk][col0+j].
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int per = TL_TILE / TL_TILE_ROWS;
    double acc[TL_TILE / TL_TILE_ROWS];
#pragma unroll
    for (int q = 0; q < per; ++q) acc[q] = 0.0;

    for (int k0 = 0; k0 < k; k0 += TL_TILE) {
        // Each load is arranged so that consecutive tx read consecutive
        // addresses in global memory, whichever way the operand is stored.
        for (int r = ty; r < TL_TILE; r += TL_TILE_ROWS) {
            if (!transA) {
                int i = row0 + r, kk = k0 + tx;
                As[r][tx] = (i < m && kk < k) ? A[(long long)i * k + kk] : 0.0f;
            } else {
                int kk = k0 + r, i = row0 + tx;
                As[tx][r] = (i < m && kk < k) ? A[(long long)kk * m + i] : 0.0f;
            }
            if (!transB) {
                int kk = k0 + r, j = col0 + tx;
                Bs[r][tx] = (kk < k && j < n) ? B[(long long)kk * n + j] : 0.0f;
            } else {
                int j = col0 + r, kk = k0 + tx;
                Bs[tx][r] = (kk < k && j < n) ? B[(long long)j * k + kk] : 0.0f;
            }
        }
        __syncthreads();
        const int kmax = min(TL_TILE, k - k0);
        for (int kk = 0; kk < kmax; ++kk) {
            const double b = (double)Bs[kk][tx];
#pragma unroll
            for (int q = 0; q < per; ++q) acc[q] += (double)As[ty + q * TL_TILE_ROWS][kk] * b;
        }
        __syncthreads();
    }

    const int col = col0 + tx;
    if (col >= n) return;
#pragma unroll
    for (int q = 0; q < per; ++q) {
        const int row = row0 + ty + q * TL_TILE_ROWS;
        if (row >= m) continue;
        const long long idx = (long long)row * n + col;
        double v = (double)alpha * acc[q];
        if (beta != 0.0f) v += (double)beta * (double)C[idx];  // beta == 0: C is not read
        C[idx] = (float)v;
    }
}

extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_gemm(int transA, int transB, int m, int n, int k, float alpha,
        const float *__restrict__ A, const float *__restrict__ B, float beta,
        float *__restrict__ C) {
    __shared__ float As[TL_TILE][TL_TILE + 1];
    __shared__ float Bs[TL_TILE][TL_TILE + 1];
    tl_gemm_tile(transA, transB, m, n, k, alpha, A, B, beta, C, blockIdx.y * TL_TILE, blockIdx.x * TL_TILE, As, Bs);
}

// tl_gemm_batched is count tl_gemms in one launch (device.SequenceKernels'
// BatchedGemm): product i reads A + i·strideA and B + i·strideB and writes
// C + i·strideC. The launch has count·(n's tiles) blocks in x (block x =
// i·tiles + tile column) and m's tiles in y; each block is tl_gemm's, so
// each product sums exactly as tl_gemm does. trans holds transA in bit 0
// and transB in bit 1, which keeps the launch within 12 parameters.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_gemm_batched(int trans, int m, int n, int k, float alpha, const float *__restrict__ A, long long strideA,
                const float *__restrict__ B, long long strideB, float beta, float *__restrict__ C, long long strideC) {
    __shared__ float As[TL_TILE][TL_TILE + 1];
    __shared__ float Bs[TL_TILE][TL_TILE + 1];
    const int tileCols = (n + TL_TILE - 1) / TL_TILE;
    const long long i = blockIdx.x / tileCols;
    const int col0 = (int)(blockIdx.x - i * tileCols) * TL_TILE;
    tl_gemm_tile(trans & 1, (trans >> 1) & 1, m, n, k, alpha, A + i * strideA, B + i * strideB, beta, C + i * strideC,
                 blockIdx.y * TL_TILE, col0, As, Bs);
}

// tl_gemm_klanes computes the same C as tl_gemm for outputs too few to keep
// a GPU busy with one thread per element and k too long for one thread to
// walk alone: the weight gradients of a convolution (op(A) the im2col
// matrix transposed, k = batch × output pixels) are a few hundred outputs
// summed over tens of thousands of terms. A block of 32×TL_KLANES threads
// owns a 32×32 tile of C and one of parts consecutive ranges of k (blockIdx.y
// = tile row + tile rows × part); thread (tx, ty) owns column tx of the tile
// and k lane ty: it sums, for the tile's rows, the terms of its range with
// k ≡ ty (mod TL_KLANES) in increasing k, each product exact in double and
// added in double. The lanes' sums are then added in a fixed tree (lane
// ty + h into lane ty, h = 8, 4, 2, 1). With one part the block writes C
// (rounded to float32 once); with more it writes its double sums to ws
// (parts × m × n, part-major) and tl_gemm_parts_sum finishes. Every order is
// fixed by the shape and parts, so the bits do not depend on timing. Each
// step stages TL_KLANES rows of op(A)'s tile in shared memory (as doubles),
// every thread loading one element, the loads consecutive in memory across
// tx when A is stored k×m. A tile's rows past m are skipped, not summed as
// zeros: a first conv's weight gradient has 9 rows.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_KLANES)
tl_gemm_klanes(int transA, int transB, int m, int n, int k, float alpha,
               const float *__restrict__ A, const float *__restrict__ B, float beta,
               float *__restrict__ C, int parts, double *__restrict__ ws) {
    __shared__ double As[TL_KLANES][TL_TILE];  // As[l][i] = op(A)[row0+i][k0+l]
    __shared__ double red[TL_KLANES][TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tileRows = (m + TL_TILE - 1) / TL_TILE;
    const int part = blockIdx.y / tileRows;
    const int row0 = (blockIdx.y - part * tileRows) * TL_TILE, col0 = blockIdx.x * TL_TILE;
    const int span = (k + parts - 1) / parts;
    const int kBegin = part * span, kEnd = min(k, kBegin + span);
    const int i = row0 + tx, j = col0 + tx;
    const int rows = min(TL_TILE, m - row0);  // the same for the whole block
    double acc[TL_TILE];
#pragma unroll
    for (int q = 0; q < TL_TILE; ++q) acc[q] = 0.0;

    for (int k0 = kBegin; k0 < kEnd; k0 += TL_KLANES) {
        const int kk = k0 + ty;
        float a = 0.0f, b = 0.0f;
        if (kk < kEnd) {
            if (i < m) a = transA ? A[(long long)kk * m + i] : A[(long long)i * k + kk];
            if (j < n) b = transB ? B[(long long)j * k + kk] : B[(long long)kk * n + j];
        }
        As[ty][tx] = (double)a;
        __syncthreads();
        const double bd = (double)b;
#pragma unroll
        for (int q = 0; q < TL_TILE; ++q)
            if (q < rows) acc[q] += As[ty][q] * bd;
        __syncthreads();
    }

#pragma unroll
    for (int q = 0; q < TL_TILE; ++q) {
        if (q < rows) {
            red[ty][tx] = acc[q];
            __syncthreads();
#pragma unroll
            for (int h = TL_KLANES / 2; h > 0; h >>= 1) {
                if (ty < h) red[ty][tx] += red[ty + h][tx];
                __syncthreads();
            }
            const int row = row0 + q;
            if (ty == 0 && j < n) {
                const long long idx = (long long)row * n + j;
                if (parts > 1) {
                    ws[((long long)part * m + row) * n + j] = red[0][tx];
                } else {
                    double v = (double)alpha * red[0][tx];
                    if (beta != 0.0f) v += (double)beta * (double)C[idx];  // beta == 0: C is not read
                    C[idx] = (float)v;
                }
            }
            __syncthreads();
        }
    }
}

// tl_gemm_parts_sum finishes a tl_gemm_klanes split into parts: C = alpha ×
// (the parts' sums of ws added in part order, in double) + beta × C, rounded
// to float32 once; one thread per element of C.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_gemm_parts_sum(int m, int n, int parts, float alpha, const double *__restrict__ ws, float beta,
                  float *__restrict__ C) {
    const long long total = (long long)m * n;
    TL_FOR_EACH(e, total) {
        double s = 0.0;
        for (int p = 0; p < parts; ++p) s += ws[(long long)p * total + e];
        double v = (double)alpha * s;
        if (beta != 0.0f) v += (double)beta * (double)C[e];  // beta == 0: C is not read
        C[e] = (float)v;
    }
}
