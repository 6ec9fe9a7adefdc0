// Column sums and the global-norm clip: reductions in double, in a fixed order.
#pragma once
#include "common.cuh"

// out = beta*out + (sum over rows of x). A block of 32×8 threads owns 32
// columns; thread (tx, ty) sums rows ty, ty+8, ... of column tx, and the
// eight partial sums are combined in a fixed tree. beta == 0: out is not read.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_col_sum(int rows, int cols, const float *x, float beta, float *out) {
    __shared__ double sh[TL_TILE_ROWS][TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * TL_TILE + tx;
    double s = 0.0;
    if (c < cols)
        for (int r = ty; r < rows; r += TL_TILE_ROWS) s += (double)x[(long long)r * cols + c];
    sh[ty][tx] = s;
    __syncthreads();
#pragma unroll
    for (int h = TL_TILE_ROWS / 2; h > 0; h >>= 1) {
        if (ty < h) sh[ty][tx] += sh[ty + h][tx];
        __syncthreads();
    }
    if (ty == 0 && c < cols) {
        double v = sh[0][tx];
        if (beta != 0.0f) v += (double)beta * (double)out[c];
        out[c] = (float)v;
    }
}

// tl_col_parts sums the columns of x (rows×cols) over parts consecutive
// ranges of rows, for the kernels that split a long column reduction over
// blocks: block (bx, p) owns 32 columns and rows [p·span, (p+1)·span), span
// = ceil(rows/parts); thread (tx, ty) sums rows begin+ty, begin+ty+8, ... of
// its column in double and the eight row lanes meet in tl_col_sum's fixed
// tree. ws holds doubles, part-major (ws[p·cols + c]):
//   mode 0: ws[p·cols+c] = Σ x (a column sum; tl_gemm_parts_sum finishes it);
//   mode 1: ws[(parts+p)·cols+c] = Σ (x - mean)², mean = (Σ_p ws[p·cols+c])/rows
//           added in part order (a mode-0 pass's sums), as every block finds it;
//   mode 2: ws[p·cols+c] = Σ x and ws[(parts+p)·cols+c] = Σ x·y (batch
//           normalisation's dbeta and dgamma, x = dy, y = xhat).
// Each order is fixed by the shape and parts, so the bits do not depend on timing.
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_TILE_ROWS)
tl_col_parts(int mode, int rows, int cols, const float *x, const float *y, int parts, double *ws) {
    __shared__ double sh[TL_TILE_ROWS][TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * TL_TILE + tx, p = blockIdx.y;
    const int span = (rows + parts - 1) / parts;
    const int begin = p * span, end = min(rows, begin + span);
    const bool live = c < cols;
    double mean = 0.0;
    if (mode == 1 && live) {
        for (int q = 0; q < parts; ++q) mean += ws[(long long)q * cols + c];
        mean /= (double)rows;
    }
    double s = 0.0, t = 0.0;
    if (live)
        for (int r = begin + ty; r < end; r += TL_TILE_ROWS) {
            const long long i = (long long)r * cols + c;
            const double v = (double)x[i];
            if (mode == 1) {
                const double d = v - mean;
                t += d * d;
            } else {
                s += v;
                if (mode == 2) t += v * (double)y[i];
            }
        }
    for (int pass = 0; pass < 2; ++pass) {
        if ((pass == 0 && mode == 1) || (pass == 1 && mode == 0)) continue;  // the same for the whole block
        sh[ty][tx] = pass == 0 ? s : t;
        __syncthreads();
#pragma unroll
        for (int h = TL_TILE_ROWS / 2; h > 0; h >>= 1) {
            if (ty < h) sh[ty][tx] += sh[ty + h][tx];
            __syncthreads();
        }
        if (ty == 0 && live) ws[((long long)pass * parts + p) * cols + c] = sh[0][tx];
        __syncthreads();
    }
}

// norm[0] = ||x||_2; when it exceeds maxNorm, x *= maxNorm/(norm+1e-6). The
// decision and the factor use the float norm that is stored, so a host
// reading norm[0] can tell whether clipping happened. One block, so that the
// norm and the scaling are one kernel and one graph node.
extern "C" __global__ void __launch_bounds__(TL_CLIP_BLOCK)
tl_clip_global_norm(long long n, float *x, float maxNorm, float *norm) {
    __shared__ double sh[TL_CLIP_BLOCK];
    double s = 0.0;
    for (long long i = threadIdx.x; i < n; i += TL_CLIP_BLOCK) {
        const double v = (double)x[i];
        s += v * v;
    }
    const float nrm = (float)sqrt(tl_block_sum<TL_CLIP_BLOCK>(s, sh));
    if (threadIdx.x == 0) norm[0] = nrm;
    if (!(nrm > maxNorm)) return;
    const float scale = (float)((double)maxNorm / ((double)nrm + 1e-6));
    for (long long i = threadIdx.x; i < n; i += TL_CLIP_BLOCK) x[i] = x[i] * scale;
}
