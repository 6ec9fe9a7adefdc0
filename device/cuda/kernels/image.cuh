// Image kernels (device.ImageKernels): im2col and its adjoint, max and
// average pooling, batch normalisation, dropout on a Philox counter, and an
// elementwise product. Activations are NHWC, channels fastest.
//
// Determinism without atomics: every output element is written by one
// thread. The adjoints (col2im and the pooling gradients) gather: the thread
// of an input element walks the output pixels whose windows hold it in
// increasing (oh, ow) order and adds their terms in float32 from zero, the
// order and precision the CPU device's scatter gives, so the two agree bit
// for bit. Batch normalisation gives each block 32 whole columns, so the
// column sums (in double, a fixed strided split over TL_BN_ROWS row lanes,
// then a fixed tree) and the normalisation that uses them are one kernel.
#pragma once
#include "common.cuh"

// tl_out_range sets [*lo, *hi) to the output positions o in [0, out) whose
// window (k wide, moved by stride, the input padded by pad) holds input
// position i: o·stride - pad <= i < o·stride - pad + k.
__device__ __forceinline__ void tl_out_range(int i, int k, int stride, int pad, int out, int *lo, int *hi) {
    const int num = i + pad - k + 1;
    *lo = num > 0 ? (num + stride - 1) / stride : 0;
    *hi = min(out, (i + pad) / stride + 1);
}

// tl_nhwc splits the index i of an N×H×W×C tensor into its image n, row
// y, column x and channel c.
__device__ __forceinline__ void tl_nhwc(long long i, int H, int W, int C, long long *n, int *y, int *x, int *c) {
    *c = (int)(i % C);
    *x = (int)(i / C % W);
    *y = (int)(i / ((long long)C * W) % H);
    *n = i / ((long long)C * W * H);
}

// cols[(n, oh, ow), (kh, kw, c)] = x[n, oh·stride-pad+kh, ow·stride-pad+kw, c],
// 0 outside the image.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_im2col(int N, int H, int W, int C, int KH, int KW, int stride, int pad, const float *x, float *cols) {
    const int OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    const long long ncols = (long long)KH * KW * C;
    const long long total = (long long)N * OH * OW * ncols;
    TL_FOR_EACH(i, total) {
        const long long row = i / ncols;
        const int col = (int)(i - row * ncols);
        const int c = col % C, kw = (col / C) % KW, kh = col / (C * KW);
        const int ow = (int)(row % OW), oh = (int)(row / OW % OH);
        const long long n = row / ((long long)OW * OH);
        const int y = oh * stride - pad + kh, xx = ow * stride - pad + kw;
        cols[i] = (y >= 0 && y < H && xx >= 0 && xx < W) ? x[((n * H + y) * W + xx) * C + c] : 0.0f;
    }
}

// dx = the adjoint of im2col applied to dcols, gathered per input element.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_col2im(int N, int H, int W, int C, int KH, int KW, int stride, int pad, const float *dcols, float *dx) {
    const int OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    const long long ncols = (long long)KH * KW * C;
    const long long total = (long long)N * H * W * C;
    TL_FOR_EACH(i, total) {
        long long n;
        int y, xx, c;
        tl_nhwc(i, H, W, C, &n, &y, &xx, &c);
        int oh0, oh1, ow0, ow1;
        tl_out_range(y, KH, stride, pad, OH, &oh0, &oh1);
        tl_out_range(xx, KW, stride, pad, OW, &ow0, &ow1);
        float s = 0.0f;
        for (int oh = oh0; oh < oh1; ++oh) {
            const int kh = y + pad - oh * stride;
            for (int ow = ow0; ow < ow1; ++ow) {
                const int kw = xx + pad - ow * stride;
                const long long row = (n * OH + oh) * OW + ow;
                s += dcols[row * ncols + (kh * KW + kw) * C + c];
            }
        }
        dx[i] = s;
    }
}

// y = the maximum of each window over the pixels inside the image, arg =
// the window position kh·K+kw of the first maximum in (kh, kw) order. A NaN
// wins over every number and the first NaN over later ones, so a NaN
// reaches the loss instead of vanishing in a window (as on the CPU device).
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_max_pool(int N, int H, int W, int C, int K, int stride, int pad, const float *x, float *y, float *arg) {
    const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    const long long total = (long long)N * OH * OW * C;
    TL_FOR_EACH(i, total) {
        long long n;
        int oh, ow, c;
        tl_nhwc(i, OH, OW, C, &n, &oh, &ow, &c);
        const int y0 = oh * stride - pad, x0 = ow * stride - pad;
        const int kh0 = max(0, -y0), kh1 = min(K, H - y0), kw0 = max(0, -x0), kw1 = min(K, W - x0);
        float best = 0.0f;
        int pos = 0;
        bool first = true;
        for (int kh = kh0; kh < kh1; ++kh) {
            for (int kw = kw0; kw < kw1; ++kw) {
                const float v = x[((n * H + y0 + kh) * W + x0 + kw) * C + c];
                if (first || v > best || (v != v && best == best)) {
                    best = v;
                    pos = kh * K + kw;
                    first = false;
                }
            }
        }
        y[i] = best;
        arg[i] = (float)pos;
    }
}

// dx = the sum of dy over the windows whose maximum each element was (by
// arg), gathered per input element. An arg that is not a window position
// (not written by tl_max_pool) adds nothing.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_max_pool_grad(int N, int H, int W, int C, int K, int stride, int pad, const float *dy, const float *arg, float *dx) {
    const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    const long long total = (long long)N * H * W * C;
    TL_FOR_EACH(i, total) {
        long long n;
        int y, xx, c;
        tl_nhwc(i, H, W, C, &n, &y, &xx, &c);
        int oh0, oh1, ow0, ow1;
        tl_out_range(y, K, stride, pad, OH, &oh0, &oh1);
        tl_out_range(xx, K, stride, pad, OW, &ow0, &ow1);
        float s = 0.0f;
        for (int oh = oh0; oh < oh1; ++oh) {
            const int kh = y + pad - oh * stride;
            for (int ow = ow0; ow < ow1; ++ow) {
                const long long o = ((n * OH + oh) * OW + ow) * C + c;
                const float a = arg[o];
                if (a >= 0.0f && a < (float)(K * K) && (int)a == kh * K + (xx + pad - ow * stride)) s += dy[o];
            }
        }
        dx[i] = s;
    }
}

// y = the window's sum over the pixels inside the image, in (kh, kw) order
// from zero, divided by K·K (padding counts as zeros).
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_avg_pool(int N, int H, int W, int C, int K, int stride, int pad, const float *x, float *y) {
    const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    const long long total = (long long)N * OH * OW * C;
    const float area = (float)(K * K);
    TL_FOR_EACH(i, total) {
        long long n;
        int oh, ow, c;
        tl_nhwc(i, OH, OW, C, &n, &oh, &ow, &c);
        const int y0 = oh * stride - pad, x0 = ow * stride - pad;
        const int kh0 = max(0, -y0), kh1 = min(K, H - y0), kw0 = max(0, -x0), kw1 = min(K, W - x0);
        float s = 0.0f;
        for (int kh = kh0; kh < kh1; ++kh)
            for (int kw = kw0; kw < kw1; ++kw) s += x[((n * H + y0 + kh) * W + x0 + kw) * C + c];
        y[i] = s / area;
    }
}

// dx = the sum of dy/(K·K) over the windows that hold each element,
// gathered per input element.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_avg_pool_grad(int N, int H, int W, int C, int K, int stride, int pad, const float *dy, float *dx) {
    const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    const long long total = (long long)N * H * W * C;
    const float area = (float)(K * K);
    TL_FOR_EACH(i, total) {
        long long n;
        int y, xx, c;
        tl_nhwc(i, H, W, C, &n, &y, &xx, &c);
        int oh0, oh1, ow0, ow1;
        tl_out_range(y, K, stride, pad, OH, &oh0, &oh1);
        tl_out_range(xx, K, stride, pad, OW, &ow0, &ow1);
        float s = 0.0f;
        for (int oh = oh0; oh < oh1; ++oh)
            for (int ow = ow0; ow < ow1; ++ow) s += dy[((n * OH + oh) * OW + ow) * C + c] / area;
        dx[i] = s;
    }
}

// tl_bn_col_sum adds v over the TL_BN_ROWS row lanes of each column lane
// of a TL_TILE×TL_BN_ROWS block in a fixed tree and returns the column's
// sum to each of its threads. sh holds TL_BN_ROWS×TL_TILE doubles.
__device__ __forceinline__ double tl_bn_col_sum(double v, double (*sh)[TL_TILE]) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    sh[ty][tx] = v;
    __syncthreads();
#pragma unroll
    for (int h = TL_BN_ROWS / 2; h > 0; h >>= 1) {
        if (ty < h) sh[ty][tx] += sh[ty + h][tx];
        __syncthreads();
    }
    const double r = sh[0][tx];
    __syncthreads();
    return r;
}

// Batch normalisation in training, x rows×cols. A block owns TL_TILE
// columns: the mean and then the biased variance around it (two passes, in
// double), stats (means, then invstd), the running update, then xhat and y
// in float32 from the stored (rounded) statistics. x is read before xhat
// and y are written, element by element, so they may alias it.
//
// With parts > 1 the sums were split over blocks beforehand (tl_col_parts,
// modes 0 then 1: ws holds the parts' sums of x, then of (x - mean)²): a
// block (bx, p) adds its columns' parts in order, block row 0 writes stats
// and the running update, and every block normalises rows [p·span,
// (p+1)·span), span = ceil(rows/parts).
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_BN_ROWS)
tl_batchnorm_train(int rows, int cols, float eps, float momentum, const float *x, const float *params, float *stats,
                   float *xhat, float *y, float *running, int parts, const double *ws) {
    __shared__ double sh[TL_BN_ROWS][TL_TILE];
    __shared__ float shMean[TL_TILE], shInv[TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * TL_TILE + tx;
    const bool live = c < cols;
    const double n = (double)rows;
    int begin = 0, end = rows;
    double mean = 0.0, var = 0.0;
    if (parts > 1) {
        const int span = (rows + parts - 1) / parts;
        begin = blockIdx.y * span;
        end = min(rows, begin + span);
        if (ty == 0 && live) {
            double s = 0.0, q = 0.0;
            for (int p = 0; p < parts; ++p) s += ws[(long long)p * cols + c];
            for (int p = 0; p < parts; ++p) q += ws[((long long)parts + p) * cols + c];
            mean = s / n;
            var = q / n;
        }
    } else {
        double s = 0.0;
        if (live)
            for (int r = ty; r < rows; r += TL_BN_ROWS) s += (double)x[(long long)r * cols + c];
        mean = tl_bn_col_sum(s, sh) / n;
        double q = 0.0;
        if (live)
            for (int r = ty; r < rows; r += TL_BN_ROWS) {
                const double d = (double)x[(long long)r * cols + c] - mean;
                q += d * d;
            }
        var = tl_bn_col_sum(q, sh) / n;
    }
    if (ty == 0) {
        const float m32 = (float)mean, inv32 = (float)(1.0 / sqrt(var + (double)eps));
        shMean[tx] = m32;
        shInv[tx] = inv32;
        if (live && blockIdx.y == 0) {
            const double m = (double)momentum;
            stats[c] = m32;
            stats[cols + c] = inv32;
            running[c] = (float)((1.0 - m) * (double)running[c] + m * mean);
            running[cols + c] = (float)((1.0 - m) * (double)running[cols + c] + m * var * n / (n - 1.0));
        }
    }
    __syncthreads();
    if (!live) return;
    const float m32 = shMean[tx], inv32 = shInv[tx], gamma = params[c], beta = params[cols + c];
    for (int r = begin + ty; r < end; r += TL_BN_ROWS) {
        const long long i = (long long)r * cols + c;
        const float h = (x[i] - m32) * inv32;
        xhat[i] = h;
        y[i] = gamma * h + beta;
    }
}

// Batch normalisation in evaluation: y = gamma·((x-rmean)·inv) + beta with
// inv = 1/sqrt(rvar+eps) in double, rounded to float32 as the training
// kernel's invstd is, the rest in float32.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_batchnorm_eval(int rows, int cols, float eps, const float *x, const float *params, const float *running, float *y) {
    const long long total = (long long)rows * cols;
    TL_FOR_EACH(i, total) {
        const int c = (int)(i % cols);
        const float inv = (float)(1.0 / sqrt((double)running[cols + c] + (double)eps));
        y[i] = params[c] * ((x[i] - running[c]) * inv) + params[cols + c];
    }
}

// Batch normalisation's backward: dparams = (dgamma = Σ dy·xhat, dbeta =
// Σ dy), column sums in double, then dx = k·((dy - a) - xhat·b) in float32
// with k = gamma·invstd, a = dbeta/rows, b = dgamma/rows, each rounded once
// to float32 from the stored dparams. A block owns TL_TILE columns. With
// parts > 1 the sums were split over blocks beforehand (tl_col_parts mode 2:
// ws holds the parts' sums of dy, then of dy·xhat): block (bx, p) adds its
// columns' parts in order, block row 0 writes dparams, and every block
// writes dx for rows [p·span, (p+1)·span), span = ceil(rows/parts).
extern "C" __global__ void __launch_bounds__(TL_TILE * TL_BN_ROWS)
tl_batchnorm_grad(int rows, int cols, const float *dy, const float *xhat, const float *params, const float *stats,
                  float *dx, float *dparams, int parts, const double *ws) {
    __shared__ double sh[TL_BN_ROWS][TL_TILE];
    __shared__ float shK[TL_TILE], shA[TL_TILE], shB[TL_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * TL_TILE + tx;
    const bool live = c < cols;
    const double n = (double)rows;
    int begin = 0, end = rows;
    float dgamma = 0.0f, dbeta = 0.0f;
    if (parts > 1) {
        const int span = (rows + parts - 1) / parts;
        begin = blockIdx.y * span;
        end = min(rows, begin + span);
        if (ty == 0 && live) {
            double b = 0.0, g = 0.0;
            for (int p = 0; p < parts; ++p) b += ws[(long long)p * cols + c];
            for (int p = 0; p < parts; ++p) g += ws[((long long)parts + p) * cols + c];
            dgamma = (float)g;
            dbeta = (float)b;
        }
    } else {
        double g = 0.0, b = 0.0;
        if (live)
            for (int r = ty; r < rows; r += TL_BN_ROWS) {
                const long long i = (long long)r * cols + c;
                const double d = (double)dy[i];
                b += d;
                g += d * (double)xhat[i];
            }
        dgamma = (float)tl_bn_col_sum(g, sh);
        dbeta = (float)tl_bn_col_sum(b, sh);
    }
    if (ty == 0 && live) {
        if (blockIdx.y == 0) {
            dparams[c] = dgamma;
            dparams[cols + c] = dbeta;
        }
        shK[tx] = (float)((double)params[c] * (double)stats[cols + c]);
        shA[tx] = (float)((double)dbeta / n);
        shB[tx] = (float)((double)dgamma / n);
    }
    __syncthreads();
    if (!live) return;
    const float k = shK[tx], a = shA[tx], bb = shB[tx];
    for (int r = begin + ty; r < end; r += TL_BN_ROWS) {
        const long long i = (long long)r * cols + c;
        dx[i] = k * ((dy[i] - a) - xhat[i] * bb);
    }
}

// Philox 4x32-10 (Salmon et al., SC 2011; Random123's constants): encrypts
// the counter c under the key (k0, k1) in place.
#define TL_PHILOX_M0 0xD2511F53u
#define TL_PHILOX_M1 0xCD9E8D57u
#define TL_PHILOX_W0 0x9E3779B9u
#define TL_PHILOX_W1 0xBB67AE85u

__device__ __forceinline__ void tl_philox(unsigned *c, unsigned k0, unsigned k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += TL_PHILOX_W0;
            k1 += TL_PHILOX_W1;
        }
        const unsigned long long p0 = (unsigned long long)TL_PHILOX_M0 * c[0];
        const unsigned long long p1 = (unsigned long long)TL_PHILOX_M1 * c[2];
        const unsigned hi0 = (unsigned)(p0 >> 32), lo0 = (unsigned)p0;
        const unsigned hi1 = (unsigned)(p1 >> 32), lo1 = (unsigned)p1;
        const unsigned c1 = c[1], c3 = c[3];
        c[0] = hi1 ^ c1 ^ k0;
        c[1] = lo1;
        c[2] = hi0 ^ c3 ^ k1;
        c[3] = lo0;
    }
}

// Dropout: mask[i] = 1/(1-p) when u_i >= p, else 0; y = x·mask. A thread
// draws one Philox block (counter offset + i/4, key the seed, read from rng
// when the kernel runs) for four elements: u_i = (word i%4 >> 8)·2^-24.
// rng holds uint32 words: seed lo, seed hi, offset lo, offset hi.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_dropout(long long n, float p, const unsigned *rng, const float *x, float *y, float *mask) {
    const unsigned k0 = rng[0], k1 = rng[1];
    const unsigned long long offset = (unsigned long long)rng[2] | ((unsigned long long)rng[3] << 32);
    const float keep = 1.0f / (1.0f - p);
    const long long blocks = (n + 3) / 4;
    TL_FOR_EACH(blk, blocks) {
        const unsigned long long ctr = offset + (unsigned long long)blk;
        unsigned w[4] = {(unsigned)ctr, (unsigned)(ctr >> 32), 0u, 0u};
        tl_philox(w, k0, k1);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long i = blk * 4 + j;
            if (i < n) {
                const float u = (float)(w[j] >> 8) * 5.9604644775390625e-08f;  // 2^-24
                const float m = u >= p ? keep : 0.0f;
                mask[i] = m;
                y[i] = x[i] * m;
            }
        }
    }
}

// Adds counters to rng's 64-bit offset (words 2 and 3), on the device, so a
// captured step advances the generator at each replay. One thread.
extern "C" __global__ void __launch_bounds__(1)
tl_advance_rng(unsigned *rng, long long counters) {
    unsigned long long offset = (unsigned long long)rng[2] | ((unsigned long long)rng[3] << 32);
    offset += (unsigned long long)counters;
    rng[2] = (unsigned)offset;
    rng[3] = (unsigned)(offset >> 32);
}

// z = x·y elementwise; z may be x or y.
extern "C" __global__ void __launch_bounds__(TL_BLOCK)
tl_mul(long long n, const float *x, const float *y, float *z) {
    TL_FOR_EACH(i, n) z[i] = x[i] * y[i];
}
