// C = alpha*op(A)*op(B) + beta*C, row-major. op(A) is m×k (A stored k×m when
// transA), op(B) is k×n (B stored n×k when transB). A block of 32×8 threads
// computes a 32×32 tile of C, each thread four rows of one column. Products of
// two floats are exact in double, and each dot product is summed in double
// in increasing k, so the result does not depend on the tiling.
#pragma once
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_gemm(int transA, int transB, int m, int n, int k, float alpha,
        const float *__restrict__ A, const float *__restrict__ B, float beta,
        float *__restrict__ C) {
    __shared__ float As[TL_TILE][TL_TILE + 1];  // As[i][kk] = op(A)[row0+i][k0+kk]
    __shared__ float Bs[TL_TILE][TL_TILE + 1];  // Bs[kk][j] = op(B)[k0+kk][col0+j]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TL_TILE, col0 = blockIdx.x * TL_TILE;
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
